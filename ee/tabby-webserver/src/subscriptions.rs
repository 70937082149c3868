//! `/subscriptions`: juniper's GraphQL-over-WebSocket connection behind our own pump, which
//! bounds what a peer may send before it has signed in and closes the socket once the session
//! it signed in with has ended.
//!
//! Juniper already verifies the connection's token again for every operation; the pump adds
//! what juniper cannot know: an unauthenticated peer gets small messages, a byte budget and
//! 10 s to send `connection_init`, and a signed-in socket is closed (4403) when its token
//! expires, its user's sessions are ended or the user is deactivated — checked on every
//! incoming message, on every directory change, every 30 s and at the token's expiry.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::extract::ws::{self, CloseFrame, WebSocket};
use futures::{Sink, SinkExt as _, Stream, StreamExt as _, future};
use juniper_graphql_ws::{ConnectionConfig, graphql_transport_ws, graphql_ws};
use tokio::sync::{mpsc, watch};

use crate::Webserver;

/// A message before `connection_init` is accepted, or on an anonymous connection.
pub const MAX_ANONYMOUS_MESSAGE_BYTES: usize = 64 * 1024;
/// All messages before `connection_init` is accepted, together.
const MAX_PRE_INIT_BYTES: usize = 128 * 1024;
/// A message on a signed-in connection (also the transport's own limit).
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
const INIT_TIMEOUT: Duration = Duration::from_secs(10);
const SESSION_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// What `connection_init` established.
#[derive(Clone, Debug, PartialEq)]
enum Session {
    Pending,
    Anonymous,
    Token(String),
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InitError(String);

fn close(code: u16, reason: &str) -> ws::Message {
    ws::Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

fn session_ended() -> ws::Message {
    close(
        4403,
        "session ended: the token expired, was signed out or its user is disabled",
    )
}

/// Serves one upgraded socket, in the protocol the client chose.
pub async fn serve(socket: WebSocket, server: Arc<Webserver>, client: Option<SocketAddr>) {
    let (session_tx, session) = watch::channel(Session::Pending);
    let schema = server.schema.clone();
    let init = {
        let server = server.clone();
        move |params: juniper::Variables| async move {
            let token = params
                .get("authorization")
                .and_then(|v| v.as_scalar())
                .and_then(|s| juniper::ScalarValue::try_as_str(s))
                .map(|v| crate::edge::bearer_value(v).unwrap_or(v.trim()).to_string());
            let ctx = match token.as_deref() {
                None | Some("") => {
                    session_tx.send_replace(Session::Anonymous);
                    server.context(None, client).await
                }
                Some(token) => {
                    let ctx = server.context(Some(token), client).await;
                    if ctx.claims.is_none() {
                        return Err(InitError("Invalid or expired token".into()));
                    }
                    session_tx.send_replace(Session::Token(token.to_string()));
                    ctx
                }
            };
            Ok(ConnectionConfig::new(ctx)
                .with_max_in_flight_operations(16)
                .with_keep_alive_interval(Duration::from_secs(15))
                // Clients need not ping (graphql-ws and our UI don't): with juniper's
                // default timeout every answer longer than 15 s was cut off.
                .with_keep_alive_timeout(Duration::ZERO))
        }
    };
    let serialized = |json: serde_json::Result<String>| {
        json.map(ws::Message::text)
            .unwrap_or_else(|e| close(1011, &format!("error serializing response: {e}")))
    };
    if socket.protocol().map(AsRef::as_ref) == Some("graphql-ws".as_bytes()) {
        let (tx, rx) = graphql_ws::Connection::new(schema, init).split();
        let rx = rx.map(move |m| serialized(serde_json::to_string(&m)));
        pump(socket, tx, rx, session, server).await;
    } else {
        let (tx, rx) = graphql_transport_ws::Connection::new(schema, init).split();
        let rx = rx.map(move |output| match output {
            graphql_transport_ws::Output::Message(m) => serialized(serde_json::to_string(&m)),
            graphql_transport_ws::Output::Close { code, message } => close(code, &message),
        });
        pump(socket, tx, rx, session, server).await;
    }
}

/// Moves messages between the socket and juniper's connection until either side ends or a
/// check fails; a failed check sends its close frame and ends the connection.
async fn pump<C, O>(
    socket: WebSocket,
    mut connection: C,
    outgoing: O,
    session: watch::Receiver<Session>,
    server: Arc<Webserver>,
) where
    C: Sink<Incoming, Error = std::convert::Infallible> + Unpin,
    O: Stream<Item = ws::Message> + Unpin,
{
    let (mut ws_tx, mut ws_rx) = socket.split();
    let (refuse_tx, refuse_rx) = mpsc::channel::<ws::Message>(1);

    let output = async move {
        let refusals = receiver_stream(refuse_rx);
        // juniper's stream ending (after a refused init, say) ends the connection.
        let outgoing = outgoing
            .map(Some)
            .chain(futures::stream::once(future::ready(None)));
        let mut out = futures::stream::select(outgoing, refusals.map(Some));
        while let Some(Some(message)) = out.next().await {
            let last = matches!(message, ws::Message::Close(_));
            if ws_tx.send(message).await.is_err() || last {
                break;
            }
        }
        let _ = ws_tx.close().await;
    };

    let input = {
        let refuse_tx = refuse_tx.clone();
        let server = server.clone();
        let session = session.clone();
        async move {
            let mut pre_init_bytes = 0usize;
            while let Some(Ok(message)) = ws_rx.next().await {
                let current = session.borrow().clone();
                let len = match &message {
                    ws::Message::Text(t) => t.len(),
                    ws::Message::Binary(b) | ws::Message::Ping(b) | ws::Message::Pong(b) => b.len(),
                    ws::Message::Close(_) => 0,
                };
                let refusal = match &current {
                    Session::Pending => {
                        pre_init_bytes += len;
                        if len > MAX_ANONYMOUS_MESSAGE_BYTES {
                            Some(close(
                                1009,
                                "message too big: at most 64 KiB before connection_init is accepted",
                            ))
                        } else if pre_init_bytes > MAX_PRE_INIT_BYTES {
                            Some(close(
                                1009,
                                "too much data before connection_init: at most 128 KiB",
                            ))
                        } else {
                            None
                        }
                    }
                    Session::Anonymous => (len > MAX_ANONYMOUS_MESSAGE_BYTES)
                        .then(|| close(1009, "message too big: at most 64 KiB without a token")),
                    Session::Token(token) => {
                        if !session_valid(&server, token).await {
                            Some(session_ended())
                        } else if len > MAX_MESSAGE_BYTES {
                            Some(close(1009, "message too big: at most 1 MiB"))
                        } else {
                            None
                        }
                    }
                };
                if let Some(refusal) = refusal {
                    let _ = refuse_tx.send(refusal).await;
                    return future::pending().await;
                }
                if matches!(message, ws::Message::Ping(_) | ws::Message::Pong(_)) {
                    continue;
                }
                if connection.send(Incoming(message)).await.is_err() {
                    break;
                }
            }
        }
    };

    let checks = async move {
        let refusal = watch_session(session, server).await;
        let _ = refuse_tx.send(refusal).await;
        future::pending::<()>().await
    };

    futures::pin_mut!(input, output, checks);
    let _ = future::select(future::select(input, output), checks).await;
}

/// Waits until the connection must be closed: `connection_init` not accepted in time, or the
/// session ended. Returns the close frame to send.
async fn watch_session(
    mut session: watch::Receiver<Session>,
    server: Arc<Webserver>,
) -> ws::Message {
    let established = match tokio::time::timeout(INIT_TIMEOUT, async {
        session
            .wait_for(|s| *s != Session::Pending)
            .await
            .map(|s| s.clone())
    })
    .await
    {
        Err(_) => {
            return close(
                4408,
                "connection initialisation timeout: send connection_init within 10 s",
            );
        }
        // The init callback is gone (the connection ended): nothing to watch.
        Ok(Err(_)) => None,
        Ok(Ok(s)) => Some(s),
    };
    let Some(Session::Token(token)) = established else {
        return future::pending().await;
    };
    let expiry = server.services.auth.session_expiry(&token).map(|at| {
        let left = (at - chrono::Utc::now()).to_std().unwrap_or_default();
        // Expired once the clock has passed `exp` (whole seconds, no leeway).
        tokio::time::Instant::now() + left + Duration::from_secs(1)
    });
    let mut changes = server.directory.changes();
    loop {
        let at_expiry = async {
            match expiry {
                Some(at) => tokio::time::sleep_until(at).await,
                None => future::pending().await,
            }
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return future::pending().await;
                }
            }
            _ = tokio::time::sleep(SESSION_CHECK_INTERVAL) => {}
            _ = at_expiry => {}
        }
        if !session_valid(&server, &token).await {
            return session_ended();
        }
    }
}

async fn session_valid(server: &Webserver, token: &str) -> bool {
    match server.services.auth.authenticate(token).await {
        Ok(_) => true,
        Err(tabby_schema::CoreError::Other(e)) => {
            // The directory could not be read: keep the socket; its operations check again.
            tracing::warn!("cannot check a WebSocket's session: {e:#}");
            true
        }
        Err(_) => false,
    }
}

fn receiver_stream<T>(mut rx: mpsc::Receiver<T>) -> impl Stream<Item = T> + Unpin {
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// A client's message, in the form juniper's connections take.
pub struct Incoming(ws::Message);

#[derive(Debug, thiserror::Error)]
pub enum IncomingError {
    #[error("invalid message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unexpected message from the client")]
    Unexpected,
}

impl<S: juniper::ScalarValue> TryFrom<Incoming> for graphql_transport_ws::Input<S> {
    type Error = IncomingError;

    fn try_from(Incoming(message): Incoming) -> Result<Self, Self::Error> {
        match message {
            ws::Message::Text(text) => Ok(Self::Message(serde_json::from_str(text.as_str())?)),
            ws::Message::Binary(bytes) => Ok(Self::Message(serde_json::from_slice(&bytes)?)),
            ws::Message::Close(_) => Ok(Self::Close),
            _ => Err(IncomingError::Unexpected),
        }
    }
}

impl<S: juniper::ScalarValue> TryFrom<Incoming> for graphql_ws::ClientMessage<S> {
    type Error = IncomingError;

    fn try_from(Incoming(message): Incoming) -> Result<Self, Self::Error> {
        match message {
            ws::Message::Text(text) => Ok(serde_json::from_str(text.as_str())?),
            ws::Message::Binary(bytes) => Ok(serde_json::from_slice(&bytes)?),
            ws::Message::Close(_) => Ok(Self::ConnectionTerminate),
            _ => Err(IncomingError::Unexpected),
        }
    }
}
