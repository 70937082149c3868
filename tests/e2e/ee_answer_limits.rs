//! What one user's Answer Engine runs may cost: at most `[answer] max_runs_per_user` generating
//! at once, over all their connections.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{ee_subscriptions::*, ee_support::*, support::*};

const CREATE_AND_RUN: &str = "subscription($input: CreateThreadAndRunInput!) {
    createThreadAndRun(input: $input) { __typename }
}";

fn ask(question: &str) -> Value {
    json!({"input": {
        "thread": {"userMessage": {"content": question}},
        "options": {"generateRelevantQuestions": false},
    }})
}

async fn start_run(server: &TabbyServer, token: &str, question: &str) -> Socket {
    let mut socket = connect(server, "graphql-transport-ws").await;
    send(&mut socket, init(Some(token))).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "1", "type": "subscribe", "payload": {"query": CREATE_AND_RUN, "variables": ask(question)}}),
    )
    .await;
    socket
}

/// A user with two runs waiting on a slow model gets a clear TOO_MANY_REQUESTS for a third,
/// on another connection too; another user is not affected.
#[tokio::test]
async fn ee_answer_a_third_concurrent_run_of_one_user_is_refused() {
    let chat = FakeServer::start(
        Protocol::OpenAi,
        Script::default()
            .pieces(["slow ", "answer"])
            .delay(Duration::from_secs(8)),
    )
    .await;
    let server = TabbyServer::start_ee(&openai_chat_config(&chat.url(), "fake"), &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &owner, "member@example.com").await;

    let mut running = Vec::new();
    for question in ["first?", "second?"] {
        let mut socket = start_run(&server, &owner.access_token, question).await;
        let first = receive_json(&mut socket).await;
        assert_eq!(
            first["payload"]["data"]["createThreadAndRun"]["__typename"], "ThreadCreated",
            "{first}"
        );
        running.push(socket);
    }

    let mut third = start_run(&server, &owner.auth_token, "third?").await;
    let refused = receive_json(&mut third).await;
    assert!(refused["payload"]["data"].is_null(), "{refused}");
    let error = &refused["payload"]["errors"][0];
    assert_eq!(code(error), Some("TOO_MANY_REQUESTS"), "{refused}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("too many answer runs in progress")),
        "{refused}"
    );

    let mut other = start_run(&server, &member.access_token, "mine?").await;
    let first = receive_json(&mut other).await;
    assert_eq!(
        first["payload"]["data"]["createThreadAndRun"]["__typename"], "ThreadCreated",
        "{first}"
    );

    // Once a run has finished, the user may start another.
    let mut finished = running.remove(0);
    loop {
        let message = receive_json(&mut finished).await;
        if message["type"] == "complete" {
            break;
        }
    }
    let mut again = start_run(&server, &owner.access_token, "again?").await;
    let first = receive_json(&mut again).await;
    assert_eq!(
        first["payload"]["data"]["createThreadAndRun"]["__typename"], "ThreadCreated",
        "{first}"
    );
}

/// Every piece of a slow answer (40 pieces, 250 ms apart: 10 s in all).
fn slow_pieces() -> Vec<String> {
    (0..40).map(|i| format!("w{i} ")).collect()
}

/// The thread id of a run started with [`start_run`], from its `ThreadCreated`.
async fn thread_id_of(server: &TabbyServer, token: &str) -> String {
    let data = gql_ok(
        server,
        Some(token),
        "{ myThreads(last: 1) { edges { node { id } } } }",
        json!({}),
    )
    .await;
    data["myThreads"]["edges"][0]["node"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn answer_text(server: &TabbyServer, token: &str, thread: &str) -> String {
    let data = gql_ok(
        server,
        Some(token),
        "query($t: ID!) { threadMessages(threadId: $t) { edges { node { role content } } } }",
        json!({"t": thread}),
    )
    .await;
    data["threadMessages"]["edges"][1]["node"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits for the first content delta of the run on `socket`.
async fn first_delta(socket: &mut Socket) {
    loop {
        let message = receive_json(socket).await;
        let item = &message["payload"]["data"]["createThreadAndRun"];
        assert!(message["type"] == "next", "{message}");
        if item["__typename"] == "ThreadAssistantMessageContentDelta" {
            return;
        }
    }
}

/// A client that leaves mid-answer: after `[answer] abandoned_run_grace_secs` the run stops
/// (the model is no longer read, what was streamed stays stored, the run's slot is free),
/// unless the thread was persisted, which gets its whole answer.
#[tokio::test]
async fn ee_answer_a_run_whose_subscriber_left_stops_unless_its_thread_is_persisted() {
    let mut script = Script::default().pieces(slow_pieces());
    script.piece_interval = Duration::from_millis(250);
    let chat = FakeServer::start(Protocol::OpenAi, script).await;
    let config = format!(
        "{}\n[answer]\nabandoned_run_grace_secs = 1\nmax_runs_per_user = 1\n",
        openai_chat_config(&chat.url(), "fake")
    );
    let server = TabbyServer::start_ee(&config, &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let token = owner.access_token.as_str();
    let full: String = slow_pieces().concat();

    let mut socket = start_run(&server, token, "leave early?").await;
    first_delta(&mut socket).await;
    drop(socket);
    let thread = thread_id_of(&server, token).await;
    // Grace (1 s) and a little more, then the stored answer stops growing, well short of the
    // full answer (which needs 10 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped = answer_text(&server, token, &thread).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(answer_text(&server, token, &thread).await, stopped);
    assert!(
        !stopped.is_empty() && stopped.len() < full.len() / 2,
        "{stopped:?}"
    );
    // The run's slot is free again (max_runs_per_user = 1).
    let mut socket = start_run(&server, token, "keep going?").await;
    let first = receive_json(&mut socket).await;
    assert_eq!(
        first["payload"]["data"]["createThreadAndRun"]["__typename"], "ThreadCreated",
        "{first}"
    );
    // This time the thread is persisted before the client leaves: it is answered in full.
    let thread = thread_id_of(&server, token).await;
    gql_ok(
        &server,
        Some(token),
        "mutation($id: ID!) { setThreadPersisted(threadId: $id) }",
        json!({"id": thread}),
    )
    .await;
    first_delta(&mut socket).await;
    drop(socket);
    let answered = poll(
        "the persisted thread's whole answer",
        Duration::from_secs(30),
        || {
            let (server, thread, full) = (&server, &thread, &full);
            async move {
                let text = answer_text(server, token, thread).await;
                (text.len() == full.len()).then_some(text)
            }
        },
    )
    .await;
    assert_eq!(answered, full);
}
