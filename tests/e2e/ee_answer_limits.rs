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
