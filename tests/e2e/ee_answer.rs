//! The Answer Engine end to end: `createThreadAndRun` / `createThreadRun` streamed over
//! `graphql-transport-ws` from the real binary, a fake OpenAI chat model that answers the
//! engine's calls by request (the code-context decision, the follow-up questions, the answer)
//! and records them, real SQLite and a real index of local git repositories.

use std::{path::Path, time::Duration};

use serde_json::{Value, json};

use crate::{
    ee_policy::{SHOP, VAULT, search, wait_until_searchable},
    ee_subscriptions::{Received, Socket, connect, init, receive, receive_json, send},
    ee_support::*,
    support::*,
};

/// The decision call's prompt ("Reply with SNIPPET if … FILE_LIST if …").
const DECIDE: &str = "Reply with SNIPPET";
/// The follow-up questions call's prompt.
const SUGGEST: &str = "Suggest three short follow-up questions";
/// The start of the default `[answer] system_prompt`.
const SYSTEM_PROMPT_START: &str = "You are Tabby, a coding assistant";

/// A file without a word in common with the pricing questions below.
const CART: &str = "def add_item(basket, item):\n    basket.append(item)\n    return basket\n";
const UTIL_RS: &str =
    "pub fn clamp_value(x: i32, lo: i32, hi: i32) -> i32 {\n    x.max(lo).min(hi)\n}\n";

const PRICING_QUESTION: &str = "How does compute_discounted_price apply the discount_rate?";
const PRICING_QUERY: &str = "compute_discounted_price discount_rate";
const ANSWER: [&str; 4] = [
    "It multiplies ",
    "the price by (1 - discount_rate) ",
    "and rounds to cents ",
    "[[citation:1]].",
];

/// Every field of every run item; `__typename` tells them apart. Fields whose types differ
/// between members are aliased.
const ITEM: &str = "fragment Item on ThreadRunItem {
    __typename
    ... on ThreadCreated { id }
    ... on ThreadUserMessageCreated { id }
    ... on ThreadAssistantMessageCreated { id }
    ... on ThreadAssistantMessageReadingCode { snippet readingFileList: fileList }
    ... on ThreadAssistantMessageAttachmentsCodeFileList { fileList truncated }
    ... on ThreadAssistantMessageAttachmentsCode {
        hits { code { gitUrl commit filepath language content startLine reason } scores { rrf bm25 embedding } }
    }
    ... on ThreadAssistantMessageReadingDoc { sourceIds }
    ... on ThreadAssistantMessageAttachmentsDoc { docHits: hits { score doc { __typename } } }
    ... on ThreadRelevantQuestions { questions }
    ... on ThreadAssistantMessageContentDelta { delta }
    ... on ThreadAssistantMessageCompleted { debugData { chatCompletionMessages { role content } } }
}";

fn create_and_run_query() -> String {
    format!(
        "subscription($input: CreateThreadAndRunInput!) {{ createThreadAndRun(input: $input) {{ ...Item }} }}\n{ITEM}"
    )
}

fn thread_run_query() -> String {
    format!(
        "subscription($input: CreateThreadRunInput!) {{ createThreadRun(input: $input) {{ ...Item }} }}\n{ITEM}"
    )
}

const MESSAGES: &str = "query($t: ID!) { threadMessages(threadId: $t) { edges { node {
    id threadId codeSourceId role content
    attachment {
        code { gitUrl commit filepath language content startLine reason }
        clientCode { filepath startLine content }
        doc { __typename }
        codeFileList { fileList truncated }
    }
} } } }";

const THREADS: &str =
    "query($e: Boolean) { threads(isEphemeral: $e) { edges { node { id userId isEphemeral } } } }";
const MY_THREADS: &str = "{ myThreads { edges { node { id userId isEphemeral } } } }";

/// A thread run as the client received it.
#[derive(Debug)]
pub(crate) struct Run {
    items: Vec<Value>,
}

impl Run {
    fn typenames(&self) -> Vec<&str> {
        self.items
            .iter()
            .map(|i| i["__typename"].as_str().expect("__typename"))
            .collect()
    }

    /// The only item of `typename`.
    pub(crate) fn one(&self, typename: &str) -> &Value {
        let found: Vec<&Value> = self
            .items
            .iter()
            .filter(|i| i["__typename"] == typename)
            .collect();
        assert_eq!(found.len(), 1, "one {typename} expected: {:#?}", self.items);
        found[0]
    }

    fn id_of(&self, typename: &str) -> String {
        self.one(typename)["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{typename} without id"))
            .to_string()
    }

    fn thread_id(&self) -> String {
        self.id_of("ThreadCreated")
    }

    fn user_message_id(&self) -> String {
        self.id_of("ThreadUserMessageCreated")
    }

    fn assistant_message_id(&self) -> String {
        self.id_of("ThreadAssistantMessageCreated")
    }

    /// The deltas, joined.
    fn content(&self) -> String {
        self.items
            .iter()
            .filter(|i| i["__typename"] == "ThreadAssistantMessageContentDelta")
            .map(|i| i["delta"].as_str().unwrap())
            .collect()
    }
}

/// The typename sequence `head`, one delta per piece of `answer`, then `Completed`.
fn expected_sequence<'a>(head: &[&'a str], answer: &[&str]) -> Vec<&'a str> {
    let mut all = head.to_vec();
    all.extend(answer.iter().map(|_| "ThreadAssistantMessageContentDelta"));
    all.push("ThreadAssistantMessageCompleted");
    all
}

const CREATED: [&str; 3] = [
    "ThreadCreated",
    "ThreadUserMessageCreated",
    "ThreadAssistantMessageCreated",
];

/// Subscribes as `token` over `graphql-transport-ws` and reads to `complete`: the items, or
/// the error that refused the subscription (no item may come before it).
async fn subscribe(
    server: &TabbyServer,
    token: &str,
    query: &str,
    variables: Value,
) -> Result<Run, Value> {
    let mut socket = open(server, token, query, variables).await;
    let mut items = Vec::new();
    loop {
        let message = receive_json(&mut socket).await;
        assert_eq!(message["id"], "1", "{message}");
        match message["type"].as_str() {
            Some("next") => {
                if let Some(errors) = message["payload"]["errors"].as_array() {
                    assert!(
                        items.is_empty(),
                        "an error after items: {message}\nitems: {items:#?}"
                    );
                    assert!(message["payload"]["data"].is_null(), "{message}");
                    assert_eq!(errors.len(), 1, "{message}");
                    assert_eq!(
                        receive_json(&mut socket).await,
                        json!({"id": "1", "type": "complete"})
                    );
                    socket.close(None).await.ok();
                    return Err(errors[0].clone());
                }
                let data = message["payload"]["data"]
                    .as_object()
                    .unwrap_or_else(|| panic!("no data: {message}"));
                assert_eq!(data.len(), 1, "{message}");
                items.push(data.values().next().unwrap().clone());
            }
            Some("complete") => break,
            _ => panic!("unexpected message: {message}"),
        }
    }
    socket.close(None).await.ok();
    Ok(Run { items })
}

/// A socket with the subscription (id `1`) started.
async fn open(server: &TabbyServer, token: &str, query: &str, variables: Value) -> Socket {
    let mut socket = connect(server, "graphql-transport-ws").await;
    send(&mut socket, init(Some(token))).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "1", "type": "subscribe", "payload": {"query": query, "variables": variables}}),
    )
    .await;
    socket
}

pub(crate) async fn create_and_run(
    server: &TabbyServer,
    token: &str,
    input: Value,
) -> Result<Run, Value> {
    subscribe(
        server,
        token,
        &create_and_run_query(),
        json!({"input": input}),
    )
    .await
}

async fn thread_run(server: &TabbyServer, token: &str, input: Value) -> Result<Run, Value> {
    subscribe(server, token, &thread_run_query(), json!({"input": input})).await
}

/// `options` with `generateRelevantQuestions` (false unless given). The SDL declares it
/// `Boolean! = false`, but juniper 0.18 refuses an input object in a variable that omits a
/// non-null field even when the field has a default ("Expected \"Boolean!\", found null"), so
/// clients send it (as upstream's do).
fn options(mut options: Value) -> Value {
    let object = options.as_object_mut().expect("options object");
    object
        .entry("generateRelevantQuestions")
        .or_insert(json!(false));
    options
}

/// `createThreadAndRun`'s input for `question` with `options`.
pub(crate) fn ask(question: &str, run_options: Value) -> Value {
    json!({"thread": {"userMessage": {"content": question}}, "options": options(run_options)})
}

/// `createThreadRun`'s input: `question` added to `thread_id`.
fn follow_up(thread_id: &str, question: &str, run_options: Value) -> Value {
    json!({"threadId": thread_id, "additionalUserMessage": {"content": question}, "options": options(run_options)})
}

/// The thread's messages, oldest first.
async fn messages(server: &TabbyServer, token: &str, thread_id: &str) -> Vec<Value> {
    let data = gql_ok(server, Some(token), MESSAGES, json!({"t": thread_id})).await;
    nodes(&data["threadMessages"])
}

fn nodes(connection: &Value) -> Vec<Value> {
    connection["edges"]
        .as_array()
        .unwrap_or_else(|| panic!("not a connection: {connection}"))
        .iter()
        .map(|e| e["node"].clone())
        .collect()
}

fn ids(nodes: &[Value]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

/// The chat requests the fake received, oldest first.
fn chat_requests(chat: &FakeServer) -> Vec<Value> {
    chat.requests_to("/v1/chat/completions")
        .into_iter()
        .map(|r| r.body)
        .collect()
}

/// The answer requests (those with the system prompt).
fn answer_requests(chat: &FakeServer) -> Vec<Value> {
    chat_requests(chat)
        .into_iter()
        .filter(|b| b["messages"][0]["role"] == "system")
        .collect()
}

/// The one answer request since the last `clear_requests`.
fn the_answer_request(chat: &FakeServer) -> Value {
    let answers = answer_requests(chat);
    assert_eq!(answers.len(), 1, "{answers:#?}");
    answers[0].clone()
}

/// The requests whose single user message contains `needle`.
fn calls_containing(chat: &FakeServer, needle: &str) -> Vec<Value> {
    chat_requests(chat)
        .into_iter()
        .filter(|b| b["messages"].to_string().contains(needle))
        .collect()
}

/// The content of the request's last message.
fn last_message(request: &Value) -> String {
    let messages = request["messages"].as_array().expect("messages");
    messages.last().unwrap()["content"]
        .as_str()
        .expect("text content")
        .to_string()
}

/// `(role, content)` of each message of a chat request.
fn roles_and_contents(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A server with the fake chat model, a fake embedder, the answer's code search thresholds
/// off, `repos` as config repositories, and no local models (an empty models directory).
struct Env {
    server: TabbyServer,
    owner: Account,
    _embedder: FakeServer,
    _models: tempfile::TempDir,
}

fn answer_config(chat: Option<&FakeServer>, embedder: &FakeServer, repos: &[&Path]) -> String {
    let mut config = String::new();
    for repo in repos {
        config.push_str(&format!(
            "[[repositories]]\ngit_url = \"file://{}\"\n\n",
            repo.display()
        ));
    }
    if let Some(chat) = chat {
        config.push_str(&openai_chat_config(&chat.url(), "fake-chat"));
    }
    config.push_str(&openai_embedding_config(&embedder.url(), "fake-embed"));
    config.push_str(&open_search_params("answer"));
    config
}

impl Env {
    async fn start(chat: Option<&FakeServer>, repos: &[&Path]) -> Env {
        let embedder =
            FakeServer::start(Protocol::OpenAi, Script::default().embedding_dim(16)).await;
        let models = tempfile::tempdir().unwrap();
        let server = TabbyServer::start_ee(
            &answer_config(chat, &embedder, repos),
            &[("TABBY_MODEL_CACHE_ROOT", models.path().to_str().unwrap())],
        );
        let owner = register_owner(&server, "owner@example.com").await;
        Env {
            server,
            owner,
            _embedder: embedder,
            _models: models,
        }
    }

    /// `repositoryList` as the owner: `name` → (sourceId, gitUrl).
    async fn repository(&self, name: &str) -> (String, String) {
        let data = gql_ok(
            &self.server,
            Some(&self.owner.access_token),
            "{ repositoryList { name sourceId gitUrl } }",
            json!({}),
        )
        .await;
        let repo = data["repositoryList"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no repository {name}: {data}"))
            .clone();
        (
            repo["sourceId"].as_str().unwrap().to_string(),
            repo["gitUrl"].as_str().unwrap().to_string(),
        )
    }

    /// Waits until each `(query, path)` is found in `source_id`.
    async fn wait_indexed(&self, source_id: &str, files: &[(&str, &str)]) {
        for (query, path) in files {
            wait_until_searchable(
                &self.server,
                &self.owner.auth_token,
                json!({"query": query, "source_id": source_id}),
                path,
            )
            .await;
        }
    }
}

/// The hit of `path` among the `AttachmentsCode` item's hits.
fn hit<'a>(hits: &'a [Value], path: &str) -> &'a Value {
    hits.iter()
        .find(|h| h["code"]["filepath"] == path)
        .unwrap_or_else(|| panic!("no hit of {path}: {hits:#?}"))
}

#[tokio::test]
async fn ee_answer_code_only_run_streams_in_order_and_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(
        tmp.path(),
        "shop",
        &[("src/pricing.py", SHOP), ("src/cart.py", CART)],
    );
    let vault = make_repo(tmp.path(), "vault", &[("src/reactor.py", VAULT)]);
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when(DECIDE, ["SNIPPET"])
            .when(SUGGEST, ["1. Unexpected question?"])
            .pieces(ANSWER),
    )
    .await;
    let env = Env::start(Some(&chat), &[&shop, &vault]).await;
    let (server, owner) = (&env.server, &env.owner);
    let (shop_id, shop_url) = env.repository("shop").await;
    let (vault_id, _) = env.repository("vault").await;
    env.wait_indexed(
        &shop_id,
        &[
            (PRICING_QUERY, "src/pricing.py"),
            ("add_item basket", "src/cart.py"),
        ],
    )
    .await;
    env.wait_indexed(&vault_id, &[("reactor_core_temperature", "src/reactor.py")])
        .await;
    chat.clear_requests();

    // A git URL naming the repository (any host or protocol) selects it.
    let run = create_and_run(
        server,
        &owner.access_token,
        ask(
            PRICING_QUESTION,
            json!({"codeQuery": {"gitUrl": "https://github.com/acme/shop.git", "content": PRICING_QUERY, "language": "python"}}),
        ),
    )
    .await
    .expect("the run starts");
    assert_eq!(
        run.typenames(),
        expected_sequence(
            &[
                CREATED[0],
                CREATED[1],
                CREATED[2],
                "ThreadAssistantMessageReadingCode",
                "ThreadAssistantMessageAttachmentsCode",
            ],
            &ANSWER
        ),
        "{:#?}",
        run.items
    );
    assert_eq!(
        run.one("ThreadAssistantMessageReadingCode"),
        &json!({"__typename": "ThreadAssistantMessageReadingCode", "snippet": true, "readingFileList": false})
    );
    let hits = run.one("ThreadAssistantMessageAttachmentsCode")["hits"]
        .as_array()
        .unwrap()
        .clone();
    let pricing = hit(&hits, "src/pricing.py");
    assert_eq!(pricing["code"]["gitUrl"], shop_url.as_str(), "{pricing}");
    assert_eq!(pricing["code"]["language"], "python", "{pricing}");
    let pricing_code = pricing["code"]["content"].as_str().unwrap();
    assert!(
        pricing_code.contains("def compute_discounted_price(price, discount_rate):"),
        "{pricing}"
    );
    for score in ["rrf", "bm25", "embedding"] {
        assert!(pricing["scores"][score].is_f64(), "{pricing}");
    }
    assert!(
        pricing["scores"]["bm25"].as_f64().unwrap() > 0.0,
        "{pricing}"
    );
    // The code context is the evidence pack: every item says why it is there.
    let reason = pricing["code"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("definition of compute_discounted_price")
            && reason.contains("search hit: matches")
            && reason.contains("discount_rate"),
        "{pricing}"
    );
    assert!(
        hits.iter()
            .all(|h| h["code"]["reason"].as_str().is_some_and(|r| !r.is_empty())),
        "{hits:#?}"
    );
    // Only the selected repository was searched.
    for h in &hits {
        assert_eq!(h["code"]["gitUrl"], shop_url.as_str(), "{h}");
        assert_ne!(h["code"]["filepath"], "src/reactor.py", "{h}");
    }
    assert_eq!(
        run.one("ThreadAssistantMessageCompleted")["debugData"],
        Value::Null
    );
    assert_eq!(run.content(), ANSWER.concat());

    // The thread as stored: the question, and the answer with the hits it streamed.
    let thread_id = run.thread_id();
    let stored = messages(server, &owner.auth_token, &thread_id).await;
    assert_eq!(stored.len(), 2, "{stored:#?}");
    let (user, assistant) = (&stored[0], &stored[1]);
    assert_eq!(user["id"], run.user_message_id().as_str());
    assert_eq!(user["threadId"], thread_id.as_str());
    assert_eq!(user["role"], "USER");
    assert_eq!(user["content"], PRICING_QUESTION);
    assert_eq!(user["codeSourceId"], Value::Null);
    assert_eq!(user["attachment"]["code"], json!([]));
    assert_eq!(assistant["id"], run.assistant_message_id().as_str());
    assert_eq!(assistant["role"], "ASSISTANT");
    assert_eq!(assistant["content"], run.content().as_str());
    assert_eq!(assistant["codeSourceId"], shop_id.as_str());
    let hit_codes: Vec<Value> = hits.iter().map(|h| h["code"].clone()).collect();
    assert_eq!(assistant["attachment"]["code"], json!(hit_codes));
    assert_eq!(assistant["attachment"]["doc"], json!([]));
    assert_eq!(assistant["attachment"]["codeFileList"], Value::Null);
    let mine =
        nodes(&gql_ok(server, Some(&owner.access_token), MY_THREADS, json!({})).await["myThreads"]);
    assert_eq!(
        mine,
        [json!({"id": thread_id, "userId": owner.id, "isEphemeral": true})]
    );

    // What the model was asked: one decision, then the answer (no follow-up questions).
    let requests = chat_requests(&chat);
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let decision = last_message(&requests[0]);
    assert_eq!(requests[0]["messages"].as_array().unwrap().len(), 1);
    assert!(decision.contains(DECIDE), "{decision}");
    assert!(decision.contains(PRICING_QUESTION), "{decision}");
    assert!(decision.contains(&shop_url), "{decision}");
    let answer = &requests[1];
    assert_eq!(answer, &the_answer_request(&chat));
    assert_eq!(answer["stream"], true, "{answer}");
    assert_eq!(answer["presence_penalty"], 0.5, "{answer}");
    assert_eq!(answer["model"], "fake-chat", "{answer}");
    let turns = roles_and_contents(answer);
    assert_eq!(turns.len(), 2, "{turns:#?}");
    assert_eq!(turns[0].0, "system");
    assert!(
        turns[0].1.starts_with(SYSTEM_PROMPT_START),
        "{}",
        turns[0].1
    );
    assert_eq!(turns[1].0, "user");
    let prompt = &turns[1].1;
    assert!(prompt.contains("[[citation:1]]\n```python"), "{prompt}");
    assert!(prompt.contains("title=\"src/pricing.py\""), "{prompt}");
    assert!(prompt.contains(pricing_code), "{prompt}");
    assert!(
        prompt.ends_with(&format!("Question: {PRICING_QUESTION}")),
        "{prompt}"
    );
    assert!(!prompt.contains("SCRAM_THRESHOLD_KELVIN"), "{prompt}");
}

#[tokio::test]
async fn ee_answer_doc_only_run_reads_only_readable_sources() {
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when(DECIDE, ["SNIPPET"])
            .pieces(["Nothing ", "documented."]),
    )
    .await;
    let env = Env::start(Some(&chat), &[]).await;
    let (server, admin) = (&env.server, &env.owner);
    let user = invite_and_register(server, admin, "user@example.com").await;
    let group = gql_ok(
        server,
        Some(&admin.access_token),
        "mutation { createUserGroup(input: {name: \"docs-team\"}) }",
        json!({}),
    )
    .await["createUserGroup"]
        .as_str()
        .unwrap()
        .to_string();
    gql_ok(
        server,
        Some(&admin.access_token),
        "mutation($s: String!, $g: ID!) { grantSourceIdReadAccess(sourceId: $s, userGroupId: $g) }",
        json!({"s": "web:private-docs", "g": group}),
    )
    .await;
    let question = "Where are the release notes?";
    let options = json!({"docQuery": {
        "content": "release notes",
        "searchPublic": false,
        "sourceIds": ["web:private-docs", "web:public-docs"]
    }});

    for (token, readable) in [
        (&user.auth_token, json!(["web:public-docs"])),
        // Admins read every source.
        (
            &admin.access_token,
            json!(["web:private-docs", "web:public-docs"]),
        ),
    ] {
        chat.clear_requests();
        let run = create_and_run(server, token, ask(question, options.clone()))
            .await
            .expect("the run starts");
        assert_eq!(
            run.typenames(),
            expected_sequence(
                &[
                    CREATED[0],
                    CREATED[1],
                    CREATED[2],
                    "ThreadAssistantMessageReadingDoc",
                    "ThreadAssistantMessageAttachmentsDoc",
                ],
                &["Nothing ", "documented."]
            ),
            "{:#?}",
            run.items
        );
        assert_eq!(
            run.one("ThreadAssistantMessageReadingDoc")["sourceIds"],
            readable
        );
        assert_eq!(
            run.one("ThreadAssistantMessageAttachmentsDoc")["docHits"],
            json!([])
        );
        // No code was read and no decision asked; the question goes to the model as it is.
        assert!(calls_containing(&chat, DECIDE).is_empty());
        let answer = the_answer_request(&chat);
        assert_eq!(last_message(&answer), question);
        let stored = messages(server, token, &run.thread_id()).await;
        assert_eq!(stored[1]["content"], "Nothing documented.");
        assert_eq!(stored[1]["attachment"]["doc"], json!([]));
        assert_eq!(stored[1]["codeSourceId"], Value::Null);
    }
}

#[tokio::test]
async fn ee_answer_code_and_doc_with_questions_and_debug_data() {
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(
        tmp.path(),
        "shop",
        &[("src/pricing.py", SHOP), ("src/cart.py", CART)],
    );
    let questions = [
        "How is the result rounded?",
        "What if discount_rate exceeds 1?",
        "Where is compute_discounted_price called?",
    ];
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when(DECIDE, ["SNIPPET"])
            .when(
                SUGGEST,
                [
                    format!("1. {}\n", questions[0]),
                    format!("2. {}\n", questions[1]),
                    format!("3. {}", questions[2]),
                ],
            )
            .pieces(ANSWER),
    )
    .await;
    let env = Env::start(Some(&chat), &[&shop]).await;
    let (server, owner) = (&env.server, &env.owner);
    let (shop_id, _) = env.repository("shop").await;
    env.wait_indexed(
        &shop_id,
        &[
            (PRICING_QUERY, "src/pricing.py"),
            ("add_item basket", "src/cart.py"),
        ],
    )
    .await;
    chat.clear_requests();

    let run = create_and_run(
        server,
        &owner.auth_token,
        ask(
            PRICING_QUESTION,
            json!({
                "codeQuery": {"sourceId": shop_id, "content": PRICING_QUERY},
                "docQuery": {"content": "discounts", "searchPublic": true, "sourceIds": ["web:public-docs"]},
                "generateRelevantQuestions": true,
                "debugOptions": {
                    "returnChatCompletionRequest": true,
                    "codeSearchParamsOverride": {"numToReturn": 1}
                }
            }),
        ),
    )
    .await
    .expect("the run starts");
    assert_eq!(
        run.typenames(),
        expected_sequence(
            &[
                CREATED[0],
                CREATED[1],
                CREATED[2],
                "ThreadAssistantMessageReadingCode",
                "ThreadAssistantMessageAttachmentsCode",
                "ThreadAssistantMessageReadingDoc",
                "ThreadAssistantMessageAttachmentsDoc",
                "ThreadRelevantQuestions",
            ],
            &ANSWER
        ),
        "{:#?}",
        run.items
    );
    // The override limits the hits to the best one.
    let hits = run.one("ThreadAssistantMessageAttachmentsCode")["hits"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(hits.len(), 1, "{hits:#?}");
    assert_eq!(hits[0]["code"]["filepath"], "src/pricing.py");
    assert_eq!(
        run.one("ThreadAssistantMessageReadingDoc")["sourceIds"],
        json!(["web:public-docs"])
    );
    assert_eq!(
        run.one("ThreadRelevantQuestions")["questions"],
        json!(questions)
    );

    // The model was asked for the decision, the questions (with the code as context), then
    // the answer.
    let requests = chat_requests(&chat);
    assert_eq!(requests.len(), 3, "{requests:#?}");
    assert!(last_message(&requests[0]).contains(DECIDE));
    let suggest = last_message(&requests[1]);
    assert!(suggest.contains(SUGGEST), "{suggest}");
    assert!(suggest.contains("[[citation:1]]"), "{suggest}");
    assert!(suggest.contains("compute_discounted_price"), "{suggest}");
    assert!(suggest.contains(PRICING_QUESTION), "{suggest}");
    assert_eq!(requests[2], the_answer_request(&chat));

    // The debug data is exactly what the model got, the system prompt first.
    let debug = &run.one("ThreadAssistantMessageCompleted")["debugData"]["chatCompletionMessages"];
    let turns: Vec<Value> = roles_and_contents(&requests[2])
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    assert_eq!(debug, &json!(turns));
    assert_eq!(debug[0]["role"], "system");
    assert!(
        debug[0]["content"]
            .as_str()
            .unwrap()
            .starts_with(SYSTEM_PROMPT_START),
        "{debug}"
    );
    assert!(
        debug[1]["content"]
            .as_str()
            .unwrap()
            .contains("[[citation:1]]"),
        "{debug}"
    );

    let stored = messages(server, &owner.access_token, &run.thread_id()).await;
    assert_eq!(stored[1]["content"], ANSWER.concat());
    assert_eq!(stored[1]["codeSourceId"], shop_id.as_str());
    assert_eq!(
        stored[1]["attachment"]["code"],
        json!([hits[0]["code"].clone()])
    );
    assert_eq!(stored[1]["attachment"]["doc"], json!([]));
}

#[tokio::test]
async fn ee_answer_without_context_streams_only_the_answer() {
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when(DECIDE, ["SNIPPET"])
            .when(
                SUGGEST,
                ["1. Should not be asked?\n2. Nor this?\n3. Nor that?"],
            )
            .pieces(["Plain ", "answer."]),
    )
    .await;
    let env = Env::start(Some(&chat), &[]).await;
    let (server, owner) = (&env.server, &env.owner);
    let answer = ["Plain ", "answer."];

    chat.clear_requests();
    let run = create_and_run(
        server,
        &owner.auth_token,
        ask("What is a monad?", json!({})),
    )
    .await
    .expect("the run starts");
    assert_eq!(
        run.typenames(),
        expected_sequence(&CREATED, &answer),
        "{:#?}",
        run.items
    );
    assert_eq!(run.content(), "Plain answer.");
    assert_eq!(chat_requests(&chat).len(), 1);
    let request = the_answer_request(&chat);
    assert_eq!(
        roles_and_contents(&request)[1],
        ("user".to_string(), "What is a monad?".to_string())
    );

    // Follow-up questions without any code or doc hits: an empty list, no model call.
    chat.clear_requests();
    let run = create_and_run(
        server,
        &owner.auth_token,
        ask(
            "What is a functor?",
            json!({"generateRelevantQuestions": true}),
        ),
    )
    .await
    .expect("the run starts");
    assert_eq!(
        run.typenames(),
        expected_sequence(
            &[
                CREATED[0],
                CREATED[1],
                CREATED[2],
                "ThreadRelevantQuestions"
            ],
            &answer
        ),
        "{:#?}",
        run.items
    );
    assert_eq!(run.one("ThreadRelevantQuestions")["questions"], json!([]));
    assert!(calls_containing(&chat, SUGGEST).is_empty());
    assert_eq!(chat_requests(&chat).len(), 1);
    let stored = messages(server, &owner.auth_token, &run.thread_id()).await;
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1]["content"], "Plain answer.");
}

#[tokio::test]
async fn ee_answer_file_list_decision_attaches_the_repository_files() {
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(
        tmp.path(),
        "shop",
        &[
            ("src/pricing.py", SHOP),
            ("src/cart.py", CART),
            ("lib/util.rs", UTIL_RS),
        ],
    );
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when(DECIDE, ["FILE_LIST"])
            .pieces(["Three ", "files."]),
    )
    .await;
    let env = Env::start(Some(&chat), &[&shop]).await;
    let (server, owner) = (&env.server, &env.owner);
    let (shop_id, _) = env.repository("shop").await;
    env.wait_indexed(
        &shop_id,
        &[
            (PRICING_QUERY, "src/pricing.py"),
            ("add_item basket", "src/cart.py"),
            ("clamp_value", "lib/util.rs"),
        ],
    )
    .await;
    let files = json!(["lib/util.rs", "src/cart.py", "src/pricing.py"]);
    let input = ask(
        "Which files does the shop have?",
        json!({"codeQuery": {"sourceId": shop_id, "content": ""}}),
    );

    chat.clear_requests();
    let run = create_and_run(server, &owner.access_token, input.clone())
        .await
        .expect("the run starts");
    assert_eq!(
        run.typenames(),
        expected_sequence(
            &[
                CREATED[0],
                CREATED[1],
                CREATED[2],
                "ThreadAssistantMessageReadingCode",
                "ThreadAssistantMessageAttachmentsCodeFileList",
            ],
            &["Three ", "files."]
        ),
        "{:#?}",
        run.items
    );
    assert_eq!(
        run.one("ThreadAssistantMessageReadingCode"),
        &json!({"__typename": "ThreadAssistantMessageReadingCode", "snippet": false, "readingFileList": true})
    );
    assert_eq!(
        run.one("ThreadAssistantMessageAttachmentsCodeFileList"),
        &json!({"__typename": "ThreadAssistantMessageAttachmentsCodeFileList", "fileList": files, "truncated": false})
    );
    let prompt = last_message(&the_answer_request(&chat));
    assert!(
        prompt.contains(
            "[[citation:1]]\nFiles in the repository:\nlib/util.rs\nsrc/cart.py\nsrc/pricing.py"
        ),
        "{prompt}"
    );
    let stored = messages(server, &owner.access_token, &run.thread_id()).await;
    assert_eq!(
        stored[1]["attachment"]["codeFileList"],
        json!({"fileList": files, "truncated": false})
    );
    assert_eq!(stored[1]["attachment"]["code"], json!([]));
    assert_eq!(stored[1]["codeSourceId"], shop_id.as_str());

    // Both words: the file list first, then the snippets (searched with the question, as the
    // query's content is empty).
    chat.update_script(|s| s.rules[0].1 = vec!["SNIPPET, FILE_LIST".into()]);
    chat.clear_requests();
    let run = create_and_run(server, &owner.access_token, input)
        .await
        .expect("the run starts");
    assert_eq!(
        run.typenames(),
        expected_sequence(
            &[
                CREATED[0],
                CREATED[1],
                CREATED[2],
                "ThreadAssistantMessageReadingCode",
                "ThreadAssistantMessageAttachmentsCodeFileList",
                "ThreadAssistantMessageAttachmentsCode",
            ],
            &["Three ", "files."]
        ),
        "{:#?}",
        run.items
    );
    assert_eq!(
        run.one("ThreadAssistantMessageReadingCode")["snippet"],
        true
    );
    let stored = messages(server, &owner.access_token, &run.thread_id()).await;
    assert_eq!(stored[1]["attachment"]["codeFileList"]["fileList"], files);
    let hits = &run.one("ThreadAssistantMessageAttachmentsCode")["hits"];
    let codes: Vec<Value> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["code"].clone())
        .collect();
    assert_eq!(stored[1]["attachment"]["code"], json!(codes));
}

#[tokio::test]
async fn ee_answer_code_context_follows_the_access_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(tmp.path(), "shop", &[("src/pricing.py", SHOP)]);
    let vault = make_repo(tmp.path(), "vault", &[("src/reactor.py", VAULT)]);
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when(DECIDE, ["SNIPPET"])
            .pieces(["About ", "the reactor."]),
    )
    .await;
    let env = Env::start(Some(&chat), &[&shop, &vault]).await;
    let (server, admin) = (&env.server, &env.owner);
    let member = invite_and_register(server, admin, "member@example.com").await;
    let outsider = invite_and_register(server, admin, "outsider@example.com").await;
    let (vault_id, _) = env.repository("vault").await;
    env.wait_indexed(
        &vault_id,
        &[(
            "reactor_core_temperature SCRAM_THRESHOLD_KELVIN",
            "src/reactor.py",
        )],
    )
    .await;
    let a = &admin.access_token;
    let group = restrict_to_new_group(server, a, "vault-team", &member, &vault_id).await;
    // The policy is in force for search (the same snapshot the engine reads).
    let (status, _) = search(
        server,
        &outsider.auth_token,
        json!({"query": "reactor_core_temperature", "source_id": vault_id}),
    )
    .await;
    assert_eq!(status, 404);

    let question = "What does reactor_core_temperature return?";
    let code_queries = [
        json!({"gitUrl": "git@github.com:acme/vault.git", "content": "reactor_core_temperature SCRAM_THRESHOLD_KELVIN"}),
        json!({"sourceId": vault_id, "content": "reactor_core_temperature SCRAM_THRESHOLD_KELVIN"}),
    ];
    for code_query in &code_queries {
        chat.clear_requests();
        let run = create_and_run(
            server,
            &outsider.auth_token,
            ask(question, json!({"codeQuery": code_query})),
        )
        .await
        .expect("the run starts");
        assert_eq!(
            run.typenames(),
            expected_sequence(&CREATED, &["About ", "the reactor."]),
            "{code_query}: {:#?}",
            run.items
        );
        assert!(calls_containing(&chat, DECIDE).is_empty(), "{code_query}");
        let everything = serde_json::to_string(&chat_requests(&chat)).unwrap();
        assert!(
            !everything.contains("SCRAM_THRESHOLD_KELVIN"),
            "{everything}"
        );
        assert!(!everything.contains("src/reactor.py"), "{everything}");
        assert_eq!(
            last_message(&the_answer_request(&chat)),
            question,
            "{code_query}"
        );
        let stored = messages(server, &outsider.auth_token, &run.thread_id()).await;
        assert_eq!(stored[1]["codeSourceId"], Value::Null);
        assert_eq!(stored[1]["attachment"]["code"], json!([]));
    }

    // A member of the granted group gets the vault's code.
    let mut member_thread = String::new();
    for code_query in &code_queries {
        chat.clear_requests();
        let run = create_and_run(
            server,
            &member.auth_token,
            ask(question, json!({"codeQuery": code_query})),
        )
        .await
        .expect("the run starts");
        assert_eq!(
            &run.typenames()[3..5],
            [
                "ThreadAssistantMessageReadingCode",
                "ThreadAssistantMessageAttachmentsCode"
            ],
            "{code_query}: {:#?}",
            run.items
        );
        let hits = run.one("ThreadAssistantMessageAttachmentsCode")["hits"]
            .as_array()
            .unwrap()
            .clone();
        assert!(
            hit(&hits, "src/reactor.py")["code"]["content"]
                .as_str()
                .unwrap()
                .contains("SCRAM_THRESHOLD_KELVIN = 1234")
        );
        let prompt = last_message(&the_answer_request(&chat));
        assert!(prompt.contains("SCRAM_THRESHOLD_KELVIN = 1234"), "{prompt}");
        let stored = messages(server, &member.auth_token, &run.thread_id()).await;
        assert_eq!(stored[1]["codeSourceId"], vault_id.as_str());
        member_thread = run.thread_id();
    }

    // The member shares the thread. The outsider may open a shared thread, but not read an
    // answer drawn from the vault: its text and attachments are withheld, its question stays.
    gql_ok(
        server,
        Some(&member.access_token),
        "mutation($id: ID!) { setThreadPersisted(threadId: $id) }",
        json!({"id": member_thread}),
    )
    .await;
    let withheld = |stored: &[Value]| {
        assert_eq!(stored[0]["content"], question, "{stored:#?}");
        let answer = &stored[1];
        assert!(
            answer["content"].as_str().unwrap().contains("withheld"),
            "{answer}"
        );
        assert_eq!(answer["codeSourceId"], Value::Null, "{answer}");
        assert_eq!(answer["attachment"]["code"], json!([]), "{answer}");
        assert_eq!(answer["attachment"]["codeFileList"], Value::Null);
        let all = serde_json::to_string(stored).unwrap();
        assert!(!all.contains("SCRAM_THRESHOLD_KELVIN"), "{all}");
        assert!(!all.contains("the reactor"), "{all}");
    };
    withheld(&messages(server, &outsider.auth_token, &member_thread).await);
    // Admins and the member still read it whole.
    for token in [&admin.access_token, &member.access_token] {
        let stored = messages(server, token, &member_thread).await;
        assert_eq!(stored[1]["content"], "About the reactor.", "{stored:#?}");
        assert_ne!(stored[1]["attachment"]["code"], json!([]));
    }
    // Leaving the group takes the answer away from its own asker too.
    gql_ok(
        server,
        Some(a),
        "mutation($g: ID!, $u: ID!) { deleteUserGroupMembership(userGroupId: $g, userId: $u) }",
        json!({"g": group, "u": member.id}),
    )
    .await;
    withheld(&messages(server, &member.access_token, &member_thread).await);
}

#[tokio::test]
async fn ee_answer_thread_run_continues_a_thread_with_its_history() {
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .when("And beta?", ["Beta ", "is second."])
            .when("What is alpha?", ["Alpha ", "is first."])
            .pieces(["Something ", "else."]),
    )
    .await;
    let env = Env::start(Some(&chat), &[]).await;
    let (server, owner) = (&env.server, &env.owner);
    let other = invite_and_register(server, owner, "other@example.com").await;
    let first = create_and_run(
        server,
        &owner.access_token,
        ask("What is alpha?", json!({})),
    )
    .await
    .expect("the run starts");
    assert_eq!(first.content(), "Alpha is first.");
    let thread_id = first.thread_id();

    chat.clear_requests();
    let second = thread_run(
        server,
        &owner.auth_token,
        follow_up(&thread_id, "And beta?", json!({})),
    )
    .await
    .expect("the run starts");
    assert_eq!(
        second.typenames(),
        expected_sequence(&CREATED[1..], &["Beta ", "is second."]),
        "{:#?}",
        second.items
    );
    assert_eq!(second.content(), "Beta is second.");
    // The model saw the earlier turns.
    let turns = roles_and_contents(&the_answer_request(&chat));
    assert_eq!(turns.len(), 4, "{turns:#?}");
    assert_eq!(turns[0].0, "system");
    assert_eq!(
        turns[1..],
        [
            ("user".to_string(), "What is alpha?".to_string()),
            ("assistant".to_string(), "Alpha is first.".to_string()),
            ("user".to_string(), "And beta?".to_string()),
        ]
    );
    let stored = messages(server, &owner.access_token, &thread_id).await;
    assert_eq!(
        ids(&stored),
        [
            first.user_message_id(),
            first.assistant_message_id(),
            second.user_message_id(),
            second.assistant_message_id()
        ]
    );
    let contents: Vec<&str> = stored
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "What is alpha?",
            "Alpha is first.",
            "And beta?",
            "Beta is second."
        ]
    );

    // Someone else's thread: FORBIDDEN, and nothing is added.
    let err = thread_run(
        server,
        &other.auth_token,
        follow_up(&thread_id, "Mine now?", json!({})),
    )
    .await
    .expect_err("another user's thread");
    assert_eq!(code(&err), Some("FORBIDDEN"), "{err}");
    assert_eq!(
        messages(server, &owner.access_token, &thread_id)
            .await
            .len(),
        4
    );

    // Unknown threads: an id that never decodes, and the id of a deleted thread.
    let gone = create_and_run(server, &owner.access_token, ask("Short-lived?", json!({})))
        .await
        .expect("the run starts")
        .thread_id();
    gql_ok(
        server,
        Some(&owner.access_token),
        "mutation($id: ID!) { deleteThread(id: $id) }",
        json!({"id": gone}),
    )
    .await;
    for missing in ["not-an-id", gone.as_str()] {
        let err = thread_run(
            server,
            &owner.auth_token,
            follow_up(missing, "Hello?", json!({})),
        )
        .await
        .expect_err("a missing thread");
        assert_eq!(code(&err), Some("NOT_FOUND"), "{missing}: {err}");
    }

    // Invalid input is refused before anything is stored.
    let before =
        nodes(&gql_ok(server, Some(&owner.access_token), MY_THREADS, json!({})).await["myThreads"]);
    let err = thread_run(
        server,
        &owner.auth_token,
        follow_up(&thread_id, "  ", json!({})),
    )
    .await
    .expect_err("empty content");
    assert_eq!(validation_paths(&err), ["content"]);
    let err = create_and_run(server, &owner.auth_token, ask(" \n", json!({})))
        .await
        .expect_err("empty content");
    assert_eq!(validation_paths(&err), ["content"]);
    for code_query in [
        json!({"gitUrl": "https://github.com/acme/shop", "sourceId": "config:0", "content": "x"}),
        json!({"content": "x"}),
    ] {
        let err = create_and_run(
            server,
            &owner.auth_token,
            ask("Valid question?", json!({"codeQuery": code_query})),
        )
        .await
        .expect_err("gitUrl and sourceId");
        assert_eq!(validation_paths(&err), ["gitUrl"], "{code_query}");
        let err = thread_run(
            server,
            &owner.auth_token,
            follow_up(&thread_id, "Valid?", json!({"codeQuery": code_query})),
        )
        .await
        .expect_err("gitUrl and sourceId");
        assert_eq!(validation_paths(&err), ["gitUrl"], "{code_query}");
    }
    let after =
        nodes(&gql_ok(server, Some(&owner.access_token), MY_THREADS, json!({})).await["myThreads"]);
    assert_eq!(after, before);
    assert_eq!(
        messages(server, &owner.access_token, &thread_id)
            .await
            .len(),
        4
    );
}

#[tokio::test]
async fn ee_answer_survives_a_client_that_disconnects_mid_stream() {
    let pieces: Vec<String> = (0..30).map(|i| format!("piece{i} ")).collect();
    let full = pieces.concat();
    let mut script = Script::default().pieces(pieces.clone());
    script.piece_interval = Duration::from_millis(100);
    let chat = FakeServer::start(Protocol::OpenAi, script).await;
    let env = Env::start(Some(&chat), &[]).await;
    let (server, owner) = (&env.server, &env.owner);

    let mut socket = open(
        server,
        &owner.access_token,
        &create_and_run_query(),
        json!({"input": ask("Tell me a long story.", json!({}))}),
    )
    .await;
    let mut thread_id = None;
    loop {
        let message = receive_json(&mut socket).await;
        assert_eq!(message["type"], "next", "{message}");
        let item = &message["payload"]["data"]["createThreadAndRun"];
        match item["__typename"].as_str() {
            Some("ThreadCreated") => thread_id = item["id"].as_str().map(str::to_string),
            Some("ThreadAssistantMessageContentDelta") => {
                assert_eq!(item["delta"], "piece0 ");
                break;
            }
            _ => {}
        }
    }
    socket.close(None).await.expect("close");
    // Drain the close handshake so that the server sees the socket go.
    while !matches!(receive(&mut socket).await, Received::Closed(_)) {}
    drop(socket);
    let thread_id = thread_id.expect("ThreadCreated before the first delta");

    // The answer was not complete when the client left...
    let now = messages(server, &owner.access_token, &thread_id).await;
    let partial = now[1]["content"].as_str().unwrap().to_string();
    assert!(
        partial.len() < full.len() && full.starts_with(&partial),
        "{partial:?}"
    );
    // ...and is completed and stored all the same.
    poll(
        "the whole answer to be stored",
        Duration::from_secs(20),
        || async {
            let stored = messages(server, &owner.access_token, &thread_id).await;
            (stored[1]["content"] == full.as_str()).then_some(())
        },
    )
    .await;
    assert_eq!(answer_requests(&chat).len(), 1);
}

#[tokio::test]
async fn ee_answer_thread_queries_and_mutations_follow_ownership() {
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default().pieces(["An ", "answer."]),
    )
    .await;
    let env = Env::start(Some(&chat), &[]).await;
    let (server, admin) = (&env.server, &env.owner);
    let alice = invite_and_register(server, admin, "alice@example.com").await;
    let bob = invite_and_register(server, admin, "bob@example.com").await;
    let (a, b) = (&alice.access_token, &bob.access_token);

    let first = create_and_run(server, a, ask("First question?", json!({})))
        .await
        .expect("the run starts");
    let thread_id = first.thread_id();
    let second = thread_run(
        server,
        a,
        follow_up(&thread_id, "Second question?", json!({})),
    )
    .await
    .expect("the run starts");
    let listed = |data: Value, field: &str| ids(&nodes(&data[field]));

    // Ephemeral: the owner and admins see it, others do not.
    let thread = json!({"id": thread_id, "userId": alice.id, "isEphemeral": true});
    assert_eq!(
        nodes(&gql_ok(server, Some(a), THREADS, json!({})).await["threads"]),
        std::slice::from_ref(&thread)
    );
    assert_eq!(
        nodes(&gql_ok(server, Some(a), MY_THREADS, json!({})).await["myThreads"]),
        std::slice::from_ref(&thread)
    );
    assert_eq!(
        listed(
            gql_ok(server, Some(&admin.access_token), THREADS, json!({})).await,
            "threads"
        ),
        std::slice::from_ref(&thread_id)
    );
    assert_eq!(
        listed(gql_ok(server, Some(b), THREADS, json!({})).await, "threads"),
        Vec::<String>::new()
    );
    assert_eq!(
        listed(
            gql_ok(server, Some(b), MY_THREADS, json!({})).await,
            "myThreads"
        ),
        Vec::<String>::new()
    );
    let err = gql_err(server, Some(b), MESSAGES, json!({"t": thread_id})).await;
    assert_eq!(code(&err), Some("FORBIDDEN"), "{err}");
    let err = gql_err(
        server,
        Some(&bob.auth_token),
        MESSAGES,
        json!({"t": thread_id}),
    )
    .await;
    assert_eq!(code(&err), Some("FORBIDDEN"), "{err}");
    assert_eq!(
        messages(server, &admin.access_token, &thread_id)
            .await
            .len(),
        4
    );

    // Nobody but the owner (or an admin) changes it.
    let (user1, assistant1) = (first.user_message_id(), first.assistant_message_id());
    let mutations = [
        (
            "mutation($id: ID!) { setThreadPersisted(threadId: $id) }",
            json!({"id": thread_id}),
        ),
        (
            "mutation($id: ID!) { deleteThread(id: $id) }",
            json!({"id": thread_id}),
        ),
        (
            "mutation($id: ID!, $u: ID!, $m: ID!) { deleteThreadMessagePair(threadId: $id, userMessageId: $u, assistantMessageId: $m) }",
            json!({"id": thread_id, "u": user1, "m": assistant1}),
        ),
        (
            "mutation($id: ID!, $m: ID!) { updateThreadMessage(input: {id: $m, threadId: $id, content: \"Hijacked\"}) }",
            json!({"id": thread_id, "m": assistant1}),
        ),
    ];
    for (mutation, vars) in &mutations {
        let err = gql_err(server, Some(b), mutation, vars.clone()).await;
        assert_eq!(code(&err), Some("FORBIDDEN"), "{mutation}: {err}");
    }
    let stored = messages(server, a, &thread_id).await;
    assert_eq!(stored.len(), 4);
    assert_eq!(stored[1]["content"], "An answer.");

    // Persisted: now everyone may read it.
    gql_ok(server, Some(a), mutations[0].0, mutations[0].1.clone()).await;
    let persisted = json!({"id": thread_id, "userId": alice.id, "isEphemeral": false});
    assert_eq!(
        nodes(&gql_ok(server, Some(b), THREADS, json!({})).await["threads"]),
        std::slice::from_ref(&persisted)
    );
    assert_eq!(
        nodes(&gql_ok(server, Some(b), THREADS, json!({"e": true})).await["threads"]),
        Vec::<Value>::new()
    );
    assert_eq!(
        listed(
            gql_ok(server, Some(b), MY_THREADS, json!({})).await,
            "myThreads"
        ),
        Vec::<String>::new()
    );
    assert_eq!(messages(server, b, &thread_id).await.len(), 4);
    // Still only the owner may change it.
    for (mutation, vars) in &mutations[1..] {
        let err = gql_err(server, Some(b), mutation, vars.clone()).await;
        assert_eq!(code(&err), Some("FORBIDDEN"), "{mutation}: {err}");
    }

    // The owner edits an answer.
    gql_ok(
        server,
        Some(a),
        "mutation($id: ID!, $m: ID!) { updateThreadMessage(input: {id: $m, threadId: $id, content: \"Edited answer.\"}) }",
        json!({"id": thread_id, "m": assistant1}),
    )
    .await;
    let stored = messages(server, a, &thread_id).await;
    assert_eq!(stored[1]["content"], "Edited answer.");
    assert_eq!(stored[3]["content"], "An answer.");
    let err = gql_err(
        server,
        Some(a),
        "mutation($id: ID!, $m: ID!) { updateThreadMessage(input: {id: $m, threadId: $id, content: \" \"}) }",
        json!({"id": thread_id, "m": assistant1}),
    )
    .await;
    assert_eq!(validation_paths(&err), ["content"]);

    // A pair must be a user message and the answer right after it.
    let err = gql_err(
        server,
        Some(a),
        mutations[2].0,
        json!({"id": thread_id, "u": user1, "m": second.assistant_message_id()}),
    )
    .await;
    assert_eq!(code(&err), Some("NOT_FOUND"), "{err}");
    gql_ok(server, Some(a), mutations[2].0, mutations[2].1.clone()).await;
    assert_eq!(
        ids(&messages(server, a, &thread_id).await),
        [second.user_message_id(), second.assistant_message_id()]
    );

    // Deleting the thread removes it for everyone.
    gql_ok(server, Some(a), mutations[1].0, mutations[1].1.clone()).await;
    for token in [a, b, &admin.access_token] {
        assert_eq!(
            listed(
                gql_ok(server, Some(token), THREADS, json!({})).await,
                "threads"
            ),
            Vec::<String>::new()
        );
        let err = gql_err(server, Some(token), MESSAGES, json!({"t": thread_id})).await;
        assert_eq!(code(&err), Some("NOT_FOUND"), "{err}");
    }
    let err = gql_err(server, Some(a), mutations[1].0, mutations[1].1.clone()).await;
    assert_eq!(code(&err), Some("NOT_FOUND"), "{err}");
}

const SERVER_INFO: &str = "{ serverInfo { isChatEnabled } }";

#[tokio::test]
async fn ee_answer_needs_a_chat_model() {
    // No `[model.chat]` and an empty models directory: the embedded default is missing.
    let env = Env::start(None, &[]).await;
    let (server, owner) = (&env.server, &env.owner);
    assert_eq!(
        gql_ok(server, None, SERVER_INFO, json!({})).await["serverInfo"]["isChatEnabled"],
        false
    );
    let err = create_and_run(server, &owner.access_token, ask("Anyone there?", json!({})))
        .await
        .expect_err("no chat model");
    assert_eq!(code(&err), Some("FORBIDDEN"), "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("chat model"),
        "{err}"
    );
    // Nothing was stored.
    assert_eq!(
        gql_ok(server, Some(&owner.access_token), MY_THREADS, json!({})).await["myThreads"]["edges"],
        json!([])
    );

    // With a chat model it is on.
    let chat = FakeServer::start(Protocol::OpenAi, Script::default()).await;
    let embedder = FakeServer::start(Protocol::OpenAi, Script::default()).await;
    let models = tempfile::tempdir().unwrap();
    let server = TabbyServer::start_ee(
        &answer_config(Some(&chat), &embedder, &[]),
        &[("TABBY_MODEL_CACHE_ROOT", models.path().to_str().unwrap())],
    );
    assert_eq!(
        gql_ok(&server, None, SERVER_INFO, json!({})).await["serverInfo"]["isChatEnabled"],
        true
    );
}

/// The Answer Engine on the default embedded chat model (no `[model]` sections): the
/// code-context decision, the follow-up questions and the streamed answer all come from the
/// real model (with `[answer] presence_penalty`, which once made its sampler fail), and a
/// follow-up question continues the thread.
#[tokio::test]
async fn ee_answer_on_the_embedded_chat_model_with_code_context_and_a_follow_up() {
    let tmp = tempfile::tempdir().unwrap();
    let shop = make_repo(
        tmp.path(),
        "shop",
        &[("src/pricing.py", SHOP), ("src/cart.py", CART)],
    );
    let models = embedded_models_dir();
    let config = format!(
        "[[repositories]]\ngit_url = \"file://{}\"\n\n[answer]\nmax_tokens = 48\n\n{}",
        shop.display(),
        open_search_params("answer")
    );
    let server = TabbyServer::start_ee(
        &config,
        &[("TABBY_MODEL_CACHE_ROOT", models.to_str().unwrap())],
    );
    let owner = register_owner(&server, "owner@example.com").await;
    let data = gql_ok(
        &server,
        Some(&owner.access_token),
        "{ repositoryList { name sourceId } }",
        json!({}),
    )
    .await;
    let shop_id = data["repositoryList"][0]["sourceId"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until_searchable(
        &server,
        &owner.auth_token,
        json!({"query": PRICING_QUERY, "source_id": shop_id}),
        "src/pricing.py",
    )
    .await;

    let check = |run: &Run, created: &[&str]| {
        let names = run.typenames();
        assert_eq!(&names[..created.len()], created, "{:#?}", run.items);
        assert_eq!(
            names.last(),
            Some(&"ThreadAssistantMessageCompleted"),
            "{:#?}",
            run.items
        );
        assert!(
            names.contains(&"ThreadAssistantMessageContentDelta"),
            "{:#?}",
            run.items
        );
        assert!(names.contains(&"ThreadRelevantQuestions"), "{names:?}");
        assert!(!run.content().trim().is_empty());
        // When the model asks for snippets, they are the evidence pack, each with its reason.
        let reading = run.one("ThreadAssistantMessageReadingCode");
        eprintln!("the embedded model chose {reading}");
        if reading["snippet"] == true {
            let hits = run.one("ThreadAssistantMessageAttachmentsCode")["hits"]
                .as_array()
                .unwrap()
                .clone();
            assert!(
                hits.iter()
                    .any(|h| h["code"]["filepath"] == "src/pricing.py"),
                "{hits:#?}"
            );
            assert!(
                hits.iter()
                    .all(|h| h["code"]["reason"].as_str().is_some_and(|r| !r.is_empty())),
                "{hits:#?}"
            );
        }
    };
    let code_query = json!({"sourceId": shop_id, "content": PRICING_QUERY, "language": "python"});
    let run = create_and_run(
        &server,
        &owner.access_token,
        ask(
            PRICING_QUESTION,
            json!({"codeQuery": code_query, "generateRelevantQuestions": true}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("the run failed: {e}\nstderr:\n{}", server.stderr()));
    check(&run, &CREATED);
    let thread = run.thread_id();

    let run = thread_run(
        &server,
        &owner.access_token,
        follow_up(
            &thread,
            "Which argument holds the rate?",
            json!({"codeQuery": code_query, "generateRelevantQuestions": true}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("the follow-up failed: {e}\nstderr:\n{}", server.stderr()));
    check(&run, &CREATED[1..]);
    let stored = messages(&server, &owner.access_token, &thread).await;
    assert_eq!(stored.len(), 4);
    assert_eq!(stored[3]["content"], run.content());
}
