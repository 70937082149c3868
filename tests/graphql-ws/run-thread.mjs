// Runs one Answer Engine thread through tabby-rs's /subscriptions with the graphql-ws client
// (graphql-transport-ws protocol), the way the web UI does, and prints the result as JSON:
//   node run-thread.mjs <http base url> <token> <question> [gitUrl]
// Output: {"items": [<each ThreadRunItem as received>]} on stdout; exit 1 with the error on
// stderr if the subscription fails.
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [base, token, question, gitUrl] = process.argv.slice(2);
if (!base || !token || !question) {
  console.error("usage: node run-thread.mjs <http base url> <token> <question> [gitUrl]");
  process.exit(2);
}

const client = createClient({
  url: base.replace(/^http/, "ws") + "/subscriptions",
  webSocketImpl: WebSocket,
  connectionParams: { authorization: `Bearer ${token}` },
  retryAttempts: 0,
});

const query = `
subscription Run($input: CreateThreadAndRunInput!) {
  createThreadAndRun(input: $input) {
    __typename
    ... on ThreadCreated { id }
    ... on ThreadUserMessageCreated { id }
    ... on ThreadAssistantMessageCreated { id }
    ... on ThreadAssistantMessageReadingCode { snippet fileList }
    ... on ThreadAssistantMessageAttachmentsCodeFileList { files: fileList truncated }
    ... on ThreadAssistantMessageAttachmentsCode {
      hits { code { gitUrl filepath language content startLine } scores { rrf bm25 embedding } }
    }
    ... on ThreadAssistantMessageContentDelta { delta }
    ... on ThreadAssistantMessageCompleted { debugData { chatCompletionMessages { role content } } }
  }
}`;

const input = {
  thread: { userMessage: { content: question } },
  options: gitUrl ? { codeQuery: { gitUrl, content: question } } : {},
};

const items = [];
try {
  await new Promise((resolve, reject) => {
    client.subscribe(
      { query, variables: { input } },
      {
        next: (result) => {
          if (result.errors) reject(new Error(JSON.stringify(result.errors)));
          else items.push(result.data.createThreadAndRun);
        },
        error: (err) => reject(err instanceof Error ? err : new Error(JSON.stringify(err))),
        complete: resolve,
      },
    );
  });
} catch (err) {
  console.error(err.message ?? String(err));
  await client.dispose();
  process.exit(1);
}
await client.dispose();
console.log(JSON.stringify({ items }));
