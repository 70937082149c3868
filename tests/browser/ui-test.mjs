// Drives the tabby-rs web UI in Debian's headless Chromium (playwright-core):
//   node ui-test.mjs <base url> <screenshot dir> <expected answer text>
// Registers the admin, asks a question about the indexed repository (streamed answer and a
// code attachment), reloads into the thread, invites a user, creates a group and restricts a
// repository, then visits the other pages. Requests that leave the server are blocked and
// counted. Prints one JSON line: {pageWeightBytes, firstLoadRequests, blockedRequests,
// screenshots, steps}. Exits 1 with the failing step on stderr.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const [base, shots, expectedAnswer] = process.argv.slice(2);
if (!base || !shots || !expectedAnswer) {
  console.error("usage: node ui-test.mjs <base url> <screenshot dir> <expected answer text>");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });
const origin = new URL(base).origin;
const steps = [];
const screenshots = [];
let blocked = 0;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless=new",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--metrics-recording-only",
  ],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
await context.route("**/*", (route) => {
  const url = route.request().url();
  if (url.startsWith(origin) || url.startsWith(origin.replace(/^http/, "ws"))) return route.continue();
  blocked += 1;
  return route.abort();
});
const page = await context.newPage();
const consoleErrors = [];
page.on("console", (m) => {
  // The deliberate 404 visit logs a failed resource load; anything else is a bug.
  if (m.type() === "error" && !/status of 404/.test(m.text())) consoleErrors.push(m.text());
});
page.on("pageerror", (e) => consoleErrors.push(String(e)));

async function step(name, fn) {
  try {
    await fn();
    steps.push(name);
  } catch (e) {
    const file = join(shots, `failed-${steps.length}.png`);
    await page.screenshot({ path: file, fullPage: true }).catch(() => {});
    console.error(`step "${name}" failed: ${e.message}\nconsole errors: ${consoleErrors.join("\n")}\nscreenshot: ${file}`);
    await browser.close();
    process.exit(1);
  }
}

async function shot(name) {
  const file = join(shots, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  screenshots.push(file);
}

// First load: count bytes of every response until the page settles.
let pageWeight = 0;
let firstLoadRequests = 0;
const countBytes = async (response) => {
  firstLoadRequests += 1;
  try {
    pageWeight += (await response.body()).length;
  } catch {}
};
page.on("response", countBytes);

const password = "Adm1n-pass!";
await step("first visit shows admin registration", async () => {
  await page.goto(base, { waitUntil: "networkidle" });
  await page.waitForURL("**/auth/signup");
  await page.getByRole("heading", { name: "Create the admin account" }).waitFor();
});
page.off("response", countBytes);
await shot("signup");

await step("register the admin", async () => {
  await page.getByLabel("Name").fill("Ada Admin");
  await page.getByLabel("Email").fill("ada@example.com");
  await page.getByLabel("Password", { exact: true }).fill(password);
  await page.getByLabel("Confirm password").fill(password);
  await page.getByRole("button", { name: "Create admin account" }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
});

await step("sign out and sign in again", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("heading", { name: "Sign in" }).waitFor();
  await shot("signin");
  await page.getByLabel("Email").fill("ada@example.com");
  await page.getByLabel("Password").fill("wrong-Pass1!");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").filter({ hasText: "Invalid email address or password" }).waitFor();
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
});

let threadUrl;
await step("ask about the repository and see the streamed answer with its code", async () => {
  await page.getByLabel("Code").selectOption({ label: "shop" });
  const question = page.getByRole("textbox", { name: "Question" });
  await question.fill("How is the discounted price computed?");
  await question.press("Enter");
  await page.locator(".answer").filter({ hasText: expectedAnswer }).waitFor({ timeout: 30_000 });
  await page.locator(".attachment").filter({ hasText: "src/pricing.py" }).waitFor();
  await page.waitForURL(/\/threads\/[^/]+$/);
  threadUrl = page.url();
  await shot("answer");
});

await step("reload into the thread and find it in the history", async () => {
  await page.reload({ waitUntil: "networkidle" });
  await page.getByRole("heading", { name: "Thread" }).waitFor();
  await page.locator(".answer").filter({ hasText: expectedAnswer }).waitFor();
  await page.locator(".turn-question").filter({ hasText: "discounted price" }).waitFor();
  await page.getByRole("link", { name: "Threads" }).click();
  await page.getByRole("link", { name: /How is the discounted price computed/ }).waitFor();
  await shot("threads");
});

await step("invite a user", async () => {
  await page.getByRole("link", { name: "Team" }).click();
  await page.getByRole("heading", { name: "Team" }).waitFor();
  await page.getByLabel("Email").fill("bob@example.com");
  await page.getByRole("button", { name: "Invite" }).click();
  await page.getByRole("cell", { name: "bob@example.com" }).waitFor();
  await page.locator("code").filter({ hasText: "invitationCode=" }).waitFor();
  await shot("team");
});

await step("create a group", async () => {
  await page.getByRole("link", { name: "Groups" }).click();
  await page.getByLabel("New group").fill("secret-team");
  await page.getByRole("button", { name: "Create group" }).click();
  await page.locator('[data-group="secret-team"]').waitFor();
  await shot("groups");
});

await step("restrict the repository to the group", async () => {
  await page.getByRole("link", { name: "Repositories" }).click();
  const row = page.locator('[data-repository="shop"]');
  await row.waitFor();
  // Its indexing job (run at start) is shown as done.
  await row.locator(".badge.ok").filter({ hasText: "indexed" }).waitFor();
  await row.getByLabel("Grant shop to a group").selectOption({ label: "secret-team" });
  await page.locator('[data-repository="shop"] .tag').filter({ hasText: "secret-team" }).waitFor();
  await shot("repositories");
});

await step("other pages render", async () => {
  for (const [nav, heading] of [
    ["Jobs", "Jobs"],
    ["Documents", "Documents"],
    ["Usage", "Usage"],
    ["Profile", "Profile"],
  ]) {
    await page.getByRole("link", { name: nav, exact: true }).click();
    await page.getByRole("heading", { name: heading, exact: true }).waitFor();
    await shot(heading.toLowerCase());
  }
  await page.locator("code.token").filter({ hasText: /^auth_/ }).waitFor();
});

await step("editor chat page", async () => {
  await page.goto(`${origin}/chat?client=vscode`, { waitUntil: "networkidle" });
  await page.getByRole("heading", { name: "Chat" }).waitFor();
  if (await page.locator("nav.top").count()) throw new Error("the editor chat page shows the site navigation");
  await shot("chat");
});

await step("unknown pages show a readable 404", async () => {
  const response = await page.goto(`${origin}/no/such/page`);
  if (response.status() !== 404) throw new Error(`status ${response.status()}`);
  await page.getByRole("heading", { name: "Not found" }).waitFor();
});

await browser.close();
if (consoleErrors.length) {
  console.error(`console errors:\n${consoleErrors.join("\n")}`);
  process.exit(1);
}
console.log(
  JSON.stringify({ pageWeightBytes: pageWeight, firstLoadRequests, blockedRequests: blocked, screenshots, steps, threadUrl }),
);
