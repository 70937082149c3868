// GraphQL over HTTP and over WebSocket (graphql-transport-ws), and the session tokens.
//
// Tokens live in localStorage: the access JWT (30 min) is refreshed with the single-use
// refresh token two minutes before it expires, and once more on a 401-like error.

const ACCESS = "tabby.accessToken";
const REFRESH = "tabby.refreshToken";

export class GraphQLError extends Error {
  constructor(errors) {
    super(errors.map((e) => describe(e)).join("; "));
    this.errors = errors;
    this.code = errors[0]?.extensions?.code;
  }
}

/// A readable message for one GraphQL error, with validation details per field.
export function describe(error) {
  const fields = error?.extensions?.["validation-errors"]?.errors;
  if (Array.isArray(fields) && fields.length) {
    return fields.map((f) => `${f.path}: ${f.message}`).join("; ");
  }
  return error?.message ?? String(error);
}

export const session = {
  get access() {
    return localStorage.getItem(ACCESS);
  },
  get refresh() {
    return localStorage.getItem(REFRESH);
  },
  set(access, refresh) {
    localStorage.setItem(ACCESS, access);
    if (refresh) localStorage.setItem(REFRESH, refresh);
    scheduleRefresh();
  },
  clear() {
    localStorage.removeItem(ACCESS);
    localStorage.removeItem(REFRESH);
    clearTimeout(refreshTimer);
  },
  /// Signs out: the server revokes the refresh token (and the session it belongs to), and
  /// the tokens are forgotten here, even when the server cannot be reached.
  async signOut() {
    const refresh = this.refresh;
    this.clear();
    if (!refresh) return;
    try {
      await request(`mutation($t: String!) { signOut(refreshToken: $t) }`, { t: refresh }, { anonymous: true });
    } catch {
      // The token expires on its own.
    }
  },
  /// Seconds since epoch at which the access token expires (0 when unknown).
  expiry() {
    const token = this.access;
    if (!token) return 0;
    try {
      const payload = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
      return payload.exp ?? 0;
    } catch {
      return 0;
    }
  },
};

let refreshTimer;
let refreshing = null;

function scheduleRefresh() {
  clearTimeout(refreshTimer);
  const exp = session.expiry();
  if (!exp) return;
  const wait = Math.max(5_000, exp * 1000 - Date.now() - 120_000);
  refreshTimer = setTimeout(() => refreshNow().catch(() => {}), wait);
}

/// Exchanges the refresh token for new tokens (one exchange at a time).
export async function refreshNow() {
  if (!session.refresh) throw new Error("not signed in");
  refreshing ??= (async () => {
    try {
      const data = await request(
        `mutation($t: String!) { refreshToken(refreshToken: $t) { accessToken refreshToken } }`,
        { t: session.refresh },
        { anonymous: true },
      );
      session.set(data.refreshToken.accessToken, data.refreshToken.refreshToken);
    } catch (e) {
      session.clear();
      window.dispatchEvent(new Event("tabby:signed-out"));
      throw e;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

async function request(query, variables, { anonymous } = {}) {
  const headers = { "content-type": "application/json" };
  if (!anonymous && session.access) headers.authorization = `Bearer ${session.access}`;
  let response;
  try {
    response = await fetch("/graphql", {
      method: "POST",
      headers,
      body: JSON.stringify({ query, variables }),
    });
  } catch (e) {
    throw new Error(`Cannot reach the server: ${e.message}`);
  }
  let body;
  try {
    body = await response.json();
  } catch {
    throw new Error(`The server answered ${response.status} without JSON`);
  }
  if (body.errors?.length) throw new GraphQLError(body.errors);
  if (!response.ok) throw new Error(`The server answered ${response.status}`);
  return body.data;
}

/// Runs a query or mutation; refreshes the session once when the token was refused.
export async function gql(query, variables = {}) {
  try {
    return await request(query, variables);
  } catch (e) {
    if (e.code === "UNAUTHORIZED" && session.refresh) {
      await refreshNow();
      return request(query, variables);
    }
    throw e;
  }
}

/// Subscribes over /subscriptions (graphql-transport-ws). Calls onNext(data) per item,
/// onError(error) once on failure, onComplete() at the end. Returns a function that stops.
export function subscribe(query, variables, { onNext, onError, onComplete }) {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/subscriptions`;
  const socket = new WebSocket(url, "graphql-transport-ws");
  let done = false;
  const finish = (fn, arg) => {
    if (done) return;
    done = true;
    fn?.(arg);
    try {
      socket.close(1000);
    } catch {}
  };
  socket.onopen = () => {
    socket.send(
      JSON.stringify({
        type: "connection_init",
        payload: session.access ? { authorization: `Bearer ${session.access}` } : {},
      }),
    );
  };
  socket.onmessage = (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    switch (message.type) {
      case "connection_ack":
        socket.send(JSON.stringify({ id: "1", type: "subscribe", payload: { query, variables } }));
        break;
      case "ping":
        socket.send(JSON.stringify({ type: "pong" }));
        break;
      case "next":
        if (message.payload?.errors?.length) finish(onError, new GraphQLError(message.payload.errors));
        else onNext?.(message.payload.data);
        break;
      case "error":
        finish(onError, new GraphQLError(message.payload ?? [{ message: "subscription failed" }]));
        break;
      case "complete":
        finish(onComplete);
        break;
    }
  };
  socket.onerror = () => finish(onError, new Error("The connection to the server failed"));
  socket.onclose = (event) => {
    if (!done) finish(onError, new Error(event.reason || `The connection closed (${event.code})`));
  };
  return () => finish(() => {});
}

scheduleRefresh();
