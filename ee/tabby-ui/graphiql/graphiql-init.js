// Starts GraphiQL on /graphql and /subscriptions. Requests carry the headers set in
// GraphiQL's "Headers" tab, e.g. {"authorization": "Bearer <token>"}; over WebSocket the same
// headers become the connection_init payload, which is where /subscriptions reads the token.
// The session of the web UI, when there is one, is offered as the default headers.
(function () {
  "use strict";
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const fetcher = GraphiQL.createFetcher({
    url: "/graphql",
    subscriptionUrl: `${scheme}//${location.host}/subscriptions`,
  });
  // The web UI keeps its session JWT here (see gql.js).
  const access = localStorage.getItem("tabby.accessToken");
  const defaultHeaders = access
    ? JSON.stringify({ authorization: `Bearer ${access}` }, null, 2)
    : undefined;
  const root = ReactDOM.createRoot(document.getElementById("graphiql"));
  root.render(
    React.createElement(GraphiQL, {
      fetcher,
      defaultHeaders,
      defaultEditorToolsVisibility: true,
    }),
  );
})();
