//! GraphQL subscriptions over WebSocket at `/subscriptions`: both protocols, the token in the
//! `connection_init` payload.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{Message, client::IntoClientRequest},
};

use crate::{ee_support::*, support::*};

pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens `/subscriptions` with the subprotocol `protocol`; checks the server picked it.
pub(crate) async fn connect(server: &TabbyServer, protocol: &str) -> Socket {
    let url = server.url("/subscriptions").replacen("http://", "ws://", 1);
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", protocol.parse().unwrap());
    let (socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("WebSocket handshake");
    assert_eq!(
        response
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some(protocol)
    );
    socket
}

pub(crate) async fn send(socket: &mut Socket, message: Value) {
    socket
        .send(Message::text(message.to_string()))
        .await
        .expect("send");
}

/// What the server sent next: a JSON message, or the close frame (code, reason); keep-alives
/// (`ka`, `ping`, `pong`) are skipped.
#[derive(Debug)]
pub(crate) enum Received {
    Json(Value),
    Closed(Option<(u16, String)>),
}

pub(crate) async fn receive(socket: &mut Socket) -> Received {
    loop {
        // Long enough for a real model's first step on a busy 2-core machine.
        let next = tokio::time::timeout(Duration::from_secs(90), socket.next())
            .await
            .expect("no message from the server within 90 s");
        match next {
            None => return Received::Closed(None),
            Some(Err(e)) => panic!("WebSocket error: {e}"),
            Some(Ok(Message::Text(text))) => {
                let value: Value = serde_json::from_str(&text).expect("JSON message");
                if ["ka", "ping", "pong"].contains(&value["type"].as_str().unwrap_or_default()) {
                    continue;
                }
                return Received::Json(value);
            }
            Some(Ok(Message::Close(frame))) => {
                return Received::Closed(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
            }
            Some(Ok(_)) => continue,
        }
    }
}

pub(crate) async fn receive_json(socket: &mut Socket) -> Value {
    match receive(socket).await {
        Received::Json(v) => v,
        other => panic!("expected a message, got {other:?}"),
    }
}

pub(crate) fn init(token: Option<&str>) -> Value {
    match token {
        Some(token) => {
            json!({"type": "connection_init", "payload": {"authorization": format!("Bearer {token}")}})
        }
        None => json!({"type": "connection_init", "payload": {}}),
    }
}

/// The operation `id` ends with one `kind` message carrying no data and an error with
/// extensions.code `code`, then `complete`.
async fn assert_refused(socket: &mut Socket, id: &str, kind: &str, code: &str) {
    let message = receive_json(socket).await;
    assert_eq!(message["id"], id, "{message}");
    assert_eq!(message["type"], kind, "{message}");
    assert!(message["payload"]["data"].is_null(), "{message}");
    let errors = message["payload"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{message}");
    assert_eq!(errors[0]["extensions"]["code"], code, "{message}");
    assert_eq!(errors[0]["path"], json!(["ping"]), "{message}");
    assert_eq!(
        receive_json(socket).await,
        json!({"id": id, "type": "complete"})
    );
}

const PING: &str = "subscription { ping(count: 3) }";

/// `graphql-transport-ws`: connection_init → connection_ack, subscribe → next × 3 → complete.
async fn transport_ws_ping(server: &TabbyServer, token: &str) {
    let mut socket = connect(server, "graphql-transport-ws").await;
    send(&mut socket, init(Some(token))).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "1", "type": "subscribe", "payload": {"query": PING}}),
    )
    .await;
    for n in 1..=3 {
        assert_eq!(
            receive_json(&mut socket).await,
            json!({"id": "1", "type": "next", "payload": {"data": {"ping": n}}})
        );
    }
    assert_eq!(
        receive_json(&mut socket).await,
        json!({"id": "1", "type": "complete"})
    );
    socket.close(None).await.ok();
}

#[tokio::test]
async fn ee_ping_over_graphql_transport_ws() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    // Both a session and an editor's auth token may subscribe.
    transport_ws_ping(&server, &owner.access_token).await;
    transport_ws_ping(&server, &owner.auth_token).await;

    // Anonymous: the connection is accepted, the subscription is refused with UNAUTHORIZED.
    let mut socket = connect(&server, "graphql-transport-ws").await;
    send(&mut socket, init(None)).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "a", "type": "subscribe", "payload": {"query": PING}}),
    )
    .await;
    assert_refused(&mut socket, "a", "next", "UNAUTHORIZED").await;

    // A bad token: the connection init is refused (4403) and the socket closed.
    let mut socket = connect(&server, "graphql-transport-ws").await;
    send(&mut socket, init(Some("not-a-token"))).await;
    match receive(&mut socket).await {
        Received::Closed(Some((code, reason))) => {
            assert_eq!(code, 4403, "{reason}");
            assert!(reason.contains("Invalid or expired token"), "{reason}");
        }
        other => panic!("expected the connection to be closed, got {other:?}"),
    }

    // Arguments are validated.
    let mut socket = connect(&server, "graphql-transport-ws").await;
    send(&mut socket, init(Some(&owner.auth_token))).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "b", "type": "subscribe", "payload": {"query": "subscription { ping(count: 0) }"}}),
    )
    .await;
    let message = receive_json(&mut socket).await;
    assert_eq!(message["type"], "next", "{message}");
    assert!(message["payload"]["data"].is_null(), "{message}");
    assert_eq!(
        validation_paths(&message["payload"]["errors"][0]),
        ["count"]
    );
}

#[tokio::test]
async fn ee_ping_over_legacy_graphql_ws() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;

    let mut socket = connect(&server, "graphql-ws").await;
    send(&mut socket, init(Some(&owner.access_token))).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "1", "type": "start", "payload": {"query": PING}}),
    )
    .await;
    for n in 1..=3 {
        assert_eq!(
            receive_json(&mut socket).await,
            json!({"id": "1", "type": "data", "payload": {"data": {"ping": n}}})
        );
    }
    assert_eq!(
        receive_json(&mut socket).await,
        json!({"id": "1", "type": "complete"})
    );

    // Anonymous: UNAUTHORIZED.
    let mut socket = connect(&server, "graphql-ws").await;
    send(&mut socket, init(None)).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "a", "type": "start", "payload": {"query": PING}}),
    )
    .await;
    assert_refused(&mut socket, "a", "data", "UNAUTHORIZED").await;

    // A bad token: connection_error, then the server ends the connection.
    let mut socket = connect(&server, "graphql-ws").await;
    send(&mut socket, init(Some("not-a-token"))).await;
    let message = receive_json(&mut socket).await;
    assert_eq!(message["type"], "connection_error", "{message}");
    assert!(
        message["payload"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Invalid or expired token")),
        "{message}"
    );
    assert!(
        matches!(receive(&mut socket).await, Received::Closed(_)),
        "the connection stays open after connection_error"
    );
}

/// The close frame the server sends within `limit`, skipping whatever came before it.
async fn closed_within(socket: &mut Socket, limit: Duration) -> (u16, String) {
    tokio::time::timeout(limit, async {
        loop {
            if let Received::Closed(frame) = receive(socket).await {
                return frame.expect("a close frame with a code");
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the socket stayed open for {limit:?}"))
}

async fn signed_in_socket(server: &TabbyServer, token: &str) -> Socket {
    let mut socket = connect(server, "graphql-transport-ws").await;
    send(&mut socket, init(Some(token))).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    socket
}

/// A WebSocket opened with a session is closed (4403) as soon as another client runs
/// `logoutAllSessions`; a socket of another user stays open.
#[tokio::test]
async fn ee_a_socket_is_closed_when_its_sessions_end() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &owner, "member@example.com").await;
    let mut socket = signed_in_socket(&server, &owner.access_token).await;
    let mut bystander = signed_in_socket(&server, &member.access_token).await;
    let ping = |id: &str| json!({"id": id, "type": "subscribe", "payload": {"query": "subscription { ping(count: 1) }"}});
    send(&mut socket, ping("1")).await;
    assert_eq!(
        receive_json(&mut socket).await,
        json!({"id": "1", "type": "next", "payload": {"data": {"ping": 1}}})
    );

    // Another client (a fresh sign-in of the same user) signs out everywhere.
    let other = gql_ok(
        &server,
        None,
        "mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken } }",
        json!({"e": owner.email, "p": PASSWORD}),
    )
    .await["tokenAuth"]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();
    gql_ok(
        &server,
        Some(&other),
        "mutation { logoutAllSessions }",
        json!({}),
    )
    .await;
    let (code, reason) = closed_within(&mut socket, Duration::from_secs(5)).await;
    assert_eq!(code, 4403, "{reason}");
    assert!(reason.contains("session ended"), "{reason}");

    send(&mut bystander, ping("2")).await;
    assert_eq!(
        receive_json(&mut bystander).await,
        json!({"id": "2", "type": "next", "payload": {"data": {"ping": 1}}})
    );
}

/// Deactivating a user closes their open sockets, an editor's auth token's included.
#[tokio::test]
async fn ee_a_socket_is_closed_when_its_user_is_deactivated() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let member = invite_and_register(&server, &owner, "member@example.com").await;
    let mut session = signed_in_socket(&server, &member.access_token).await;
    let mut editor = signed_in_socket(&server, &member.auth_token).await;
    gql_ok(
        &server,
        Some(&owner.access_token),
        "mutation($id: ID!) { updateUserActive(id: $id, active: false) }",
        json!({"id": member.id}),
    )
    .await;
    for socket in [&mut session, &mut editor] {
        let (code, reason) = closed_within(socket, Duration::from_secs(5)).await;
        assert_eq!(code, 4403, "{reason}");
    }
}

/// A socket signed in with a JWT is closed when the JWT expires, without any message from
/// the client.
#[tokio::test]
async fn ee_a_socket_is_closed_when_its_token_expires() {
    let server = TabbyServer::start_ee("", &[("TABBY_WEBSERVER_JWT_TOKEN_SECRET", JWT_SECRET)]);
    let owner = register_owner(&server, "owner@example.com").await;
    let now = now();
    let short = mint_jwt(JWT_SECRET, &owner.id, now, now + 3);
    let mut socket = signed_in_socket(&server, &short).await;
    let (code, reason) = closed_within(&mut socket, Duration::from_secs(8)).await;
    assert_eq!(code, 4403, "{reason}");
}

/// Before `connection_init` is accepted a peer may send at most 64 KiB in one message; a
/// signed-in connection may send larger ones.
#[tokio::test]
async fn ee_a_large_message_before_connection_init_closes_the_socket() {
    let server = TabbyServer::start_ee("", &[]);
    let owner = register_owner(&server, "owner@example.com").await;
    let padding = " ".repeat(100 * 1024);

    let mut socket = connect(&server, "graphql-transport-ws").await;
    socket
        .send(Message::text(format!(
            "{{\"type\": \"connection_init\", \"payload\": {{}}}}{padding}"
        )))
        .await
        .expect("send");
    let (code, reason) = closed_within(&mut socket, Duration::from_secs(5)).await;
    assert_eq!(code, 1009, "{reason}");
    assert!(reason.contains("64 KiB"), "{reason}");

    // Anonymous after init: still 64 KiB.
    let mut socket = connect(&server, "graphql-transport-ws").await;
    send(&mut socket, init(None)).await;
    assert_eq!(receive_json(&mut socket).await["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "1", "type": "subscribe", "payload": {"query": format!("{PING}{padding}")}}),
    )
    .await;
    assert_eq!(
        closed_within(&mut socket, Duration::from_secs(5)).await.0,
        1009
    );

    let mut socket = signed_in_socket(&server, &owner.access_token).await;
    send(
        &mut socket,
        json!({"id": "1", "type": "subscribe", "payload": {"query": format!("{PING}{padding}")}}),
    )
    .await;
    assert_eq!(
        receive_json(&mut socket).await,
        json!({"id": "1", "type": "next", "payload": {"data": {"ping": 1}}})
    );
}

/// A peer that never sends `connection_init` is closed after 10 s (4408).
#[tokio::test]
async fn ee_a_socket_without_connection_init_is_closed() {
    let server = TabbyServer::start_ee("", &[]);
    let mut socket = connect(&server, "graphql-transport-ws").await;
    let started = std::time::Instant::now();
    let (code, reason) = closed_within(&mut socket, Duration::from_secs(20)).await;
    assert_eq!(code, 4408, "{reason}");
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
}
