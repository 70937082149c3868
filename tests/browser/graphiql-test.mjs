// Opens /graphiql in Debian's headless Chromium (playwright-core) and runs a query with a
// session token in GraphiQL's headers:
//   node graphiql-test.mjs <base url> <access token>
// Fails on any console error (a CSP violation is one), any request leaving the server, or if
// GraphiQL does not show the query's result. Prints one JSON line: {blockedRequests, result}.
import { chromium } from "playwright-core";

const [base, token] = process.argv.slice(2);
if (!base || !token) {
  console.error("usage: node graphiql-test.mjs <base url> <access token>");
  process.exit(2);
}
const origin = new URL(base).origin;
let blocked = 0;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--headless=new", "--no-sandbox", "--disable-background-networking", "--no-first-run"],
});
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  await context.route("**/*", (route) => {
    if (route.request().url().startsWith(origin)) return route.continue();
    blocked += 1;
    return route.abort();
  });
  // The web UI's stored session becomes GraphiQL's default headers.
  await context.addInitScript((t) => localStorage.setItem("tabby.accessToken", t), token);
  const page = await context.newPage();
  const errors = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${base}/graphiql`);
  await page.waitForSelector(".graphiql-container", { timeout: 20000 });
  await page.evaluate(() => {
    const editor = document.querySelector(".graphiql-query-editor .CodeMirror").CodeMirror;
    editor.setValue("{ me { email } }");
  });
  await page.click(".graphiql-execute-button");
  await page.waitForFunction(
    () => document.querySelector(".result-window")?.innerText.includes("@"),
    null,
    { timeout: 20000 },
  );
  const result = await page.evaluate(() => document.querySelector(".result-window").innerText);
  if (errors.length) throw new Error(`console errors: ${errors.join(" | ")}`);
  if (blocked) throw new Error(`${blocked} requests left the server`);
  console.log(JSON.stringify({ blockedRequests: blocked, result }));
} finally {
  await browser.close();
}
