// Drives the tabby-rs web UI in Debian's headless Chromium (playwright-core):
//   node ui-test.mjs <base url> <screenshot dir> <expected answer text> <smtp port> <mail dir> <ldap port> <idp url> <vendor url> <vendor token>
// Registers the admin, sets up mail (the SMTP server on <smtp port> writes what it receives
// to <mail dir>, see tests/smtp/sink.py) and sends a test mail, asks a question about the
// indexed repository (streamed answer and a code attachment), reloads into the thread,
// invites a user, creates a group and restricts a repository, visits the other pages, edits
// the security setting, registers the invited user from the mailed link, and resets the
// admin's password through a mailed link, sets up LDAP (slapd on <ldap port>, seeded by the
// Rust test) and signs in as a directory user, sets up OpenID Connect (the Rust test's issuer
// at <idp url>, the only other origin the page may reach) and signs in through it, and adds a
// GitHub Enterprise integration (the Rust test's fake REST server at <vendor url>). Requests that leave the server are blocked and
// counted. Prints one JSON line: {pageWeightBytes, firstLoadRequests, blockedRequests,
// screenshots, steps}. Exits 1 with the failing step on stderr.
import { chromium } from "playwright-core";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const [base, shots, expectedAnswer, smtpPort, mailDir, ldapPort, idpUrl, vendorUrl, vendorToken] = process.argv.slice(2);
if (!base || !shots || !expectedAnswer || !smtpPort || !mailDir || !ldapPort || !idpUrl || !vendorUrl || !vendorToken) {
  console.error("usage: node ui-test.mjs <base url> <screenshot dir> <expected answer text> <smtp port> <mail dir> <ldap port> <idp url> <vendor url> <vendor token>");
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
  // The sign-in provider, reached only by the OpenID Connect step's redirects.
  if (url.startsWith(new URL(idpUrl).origin)) return route.continue();
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

/// Waits for a mail to `to` whose subject contains `subject`; returns {subject, body}.
async function mailTo(to, subject) {
  for (let i = 0; i < 200; i++) {
    for (const name of readdirSync(mailDir).filter((n) => n.endsWith(".json")).sort()) {
      const mail = JSON.parse(readFileSync(join(mailDir, name), "utf8"));
      if (mail.rcpt_tos.includes(to) && mail.subject.includes(subject)) return mail;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no mail to ${to} about "${subject}"`);
}

function mailLink(mail) {
  const url = mail.body.split(/\s+/).find((w) => w.startsWith("http") && w.includes("/auth/"));
  if (!url) throw new Error(`no link in ${mail.body}`);
  return url;
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
  // The header first: a body can become unreadable once the page navigates on (the redirect
  // to /auth/signup), which on a loaded machine used to drop the bundle from the count.
  const declared = Number(response.headers()["content-length"] || 0);
  try {
    pageWeight += (await response.body()).length;
  } catch {
    pageWeight += declared;
  }
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
  await page.getByLabel("Password", { exact: true }).fill("wrong-Pass1!");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await page.getByRole("alert").filter({ hasText: "Invalid email address or password" }).waitFor();
  await page.getByLabel("Password", { exact: true }).fill(password);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
});

await step("set up mail and send a test mail", async () => {
  await page.getByRole("link", { name: "Mail", exact: true }).click();
  await page.getByRole("heading", { name: "Mail", exact: true }).waitFor();
  await page.getByLabel("SMTP server").fill("127.0.0.1");
  await page.getByLabel("Port").fill(smtpPort);
  await page.getByLabel("Encryption").selectOption("NONE");
  await page.getByLabel("Authentication").selectOption("NONE");
  await page.getByLabel("Sender address").fill("tabby@example.com");
  await page.getByRole("button", { name: "Save mail settings" }).click();
  await page.getByRole("status").filter({ hasText: "Mail settings saved" }).waitFor();
  await page.getByLabel("External URL").fill(origin);
  await page.getByRole("button", { name: "Save URL" }).click();
  await page.getByRole("status").filter({ hasText: "Links in mails" }).waitFor();
  await page.getByLabel("Send a test mail to").fill("ada@example.com");
  await page.getByRole("button", { name: "Send test mail" }).click();
  await page.getByRole("status").filter({ hasText: "accepted a test mail" }).waitFor();
  await mailTo("ada@example.com", "Tabby test mail");
  await shot("mail");
  await page.getByRole("link", { name: "Ask", exact: true }).click();
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
  await page.getByRole("status").filter({ hasText: "Invitation mailed to bob@example.com" }).waitFor();
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

await step("browse and search the repository's code", async () => {
  await page.getByRole("link", { name: "Code", exact: true }).click();
  await page.getByRole("heading", { name: "Code", exact: true }).waitFor();
  await page.locator('ul.tree li[data-kind="dir"]').filter({ hasText: "src/" }).getByRole("link").click();
  await page.locator("ul.tree").getByRole("link", { name: "pricing.py" }).click();
  await page.locator("pre.code-lines").filter({ hasText: "def " }).waitFor();
  await page.getByLabel(/Search this repository/).fill("discount");
  await page.getByRole("button", { name: "Search", exact: true }).click();
  const hit = page.locator(".grep-line").first();
  await hit.waitFor();
  await hit.getByRole("link").click();
  await page.locator("pre.code-lines .hit").waitFor();
  await shot("code");
  await page.getByRole("link", { name: "Ask about this file" }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
  const question = await page.getByRole("textbox", { name: "Question" }).inputValue();
  if (!question.includes("src/pricing.py")) throw new Error(`question not prefilled: ${question}`);
});

await step("security settings", async () => {
  await page.getByRole("link", { name: "Security", exact: true }).click();
  await page.getByRole("heading", { name: "Security", exact: true }).waitFor();
  await page.getByLabel("Self sign-up domains").fill("example.org");
  await page.getByLabel("Disable password sign-in").check();
  await page.getByRole("button", { name: "Save security settings" }).click();
  await page.getByRole("alert").filter({ hasText: "another sign-in method" }).waitFor();
  await page.getByLabel("Disable password sign-in").uncheck();
  await page.getByRole("button", { name: "Save security settings" }).click();
  await page.getByRole("status").filter({ hasText: "Security settings saved" }).waitFor();
  if ((await page.getByLabel("Self sign-up domains").inputValue()) !== "example.org") throw new Error("domains not kept");
  await shot("security");
});

await step("set up LDAP", async () => {
  await page.getByRole("link", { name: "LDAP", exact: true }).click();
  await page.getByRole("heading", { name: "LDAP", exact: true }).waitFor();
  await page.getByLabel("LDAP host").fill("127.0.0.1");
  await page.getByLabel("LDAP port").fill(ldapPort);
  await page.getByLabel("Connection security").selectOption("START_TLS");
  await page.getByLabel("Skip TLS certificate verification").check();
  await page.getByLabel("Bind DN").fill("cn=tabby,ou=services,dc=example,dc=org");
  await page.getByLabel("Bind password").fill("svc-Secret-not-in-the-db");
  await page.getByLabel("Base DN").fill("dc=example,dc=org");
  await page.getByRole("button", { name: "Test connection" }).click();
  await page.getByRole("status").filter({ hasText: "accepted the bind" }).waitFor();
  await page.getByRole("button", { name: "Save LDAP settings" }).click();
  await page.getByRole("status").filter({ hasText: "LDAP settings saved" }).waitFor();
  await shot("ldap");
});

await step("set up OpenID Connect", async () => {
  await page.getByRole("link", { name: "OAuth", exact: true }).click();
  await page.getByRole("heading", { name: "OAuth", exact: true }).waitFor();
  const form = page.locator('[data-provider="OIDC"]');
  await form.locator("code").filter({ hasText: "/oauth/callback/oidc" }).waitFor();
  await form.getByLabel("OpenID Connect client ID").fill("tabby-client");
  await form.getByLabel("OpenID Connect client secret").fill("oauth-Client-secret-not-in-the-db");
  await form.getByLabel("OpenID Connect URL").fill(idpUrl);
  await form.getByRole("button", { name: "Save OpenID Connect" }).click();
  await page.getByRole("status").filter({ hasText: "OpenID Connect sign-in saved" }).waitFor();
  await shot("oauth");
});

await step("connect a GitHub Enterprise integration", async () => {
  await page.getByRole("link", { name: "Integrations", exact: true }).click();
  await page.getByRole("heading", { name: "Integrations", exact: true }).waitFor();
  await page.getByLabel("Kind").selectOption("GITHUB_SELF_HOSTED");
  await page.getByLabel("Integration name").fill("Octo");
  await page.getByLabel("Access token").fill(vendorToken);
  await page.getByLabel("API base URL (self-hosted only)").fill(vendorUrl);
  await page.getByRole("button", { name: "Add integration" }).click();
  await page.getByRole("status").filter({ hasText: "Integration added" }).waitFor();
  // The badge can turn ok before the sync job has stored the provided repositories (the job
  // runs in the background; on a loaded machine later): reload until both show.
  for (let i = 0; i < 120; i++) {
    const ok = await page.locator('[data-integration="Octo"] .badge.ok').count();
    const provided = await page.locator('[data-integration="Octo"] [data-provided="octo/a"]').count();
    if (ok && provided) break;
    await new Promise((r) => setTimeout(r, 250));
    await page.getByRole("link", { name: "Integrations", exact: true }).click();
    await page.getByRole("heading", { name: "Integrations", exact: true }).waitFor();
  }
  await page.locator('[data-integration="Octo"] .badge.ok').waitFor();
  const row = page.locator('[data-integration="Octo"] [data-provided="octo/a"]');
  await row.waitFor();
  // Turning indexing on and off again (the fake vendor serves no git, so the run itself fails).
  await row.getByRole("button", { name: "Index", exact: true }).click();
  await page.getByRole("status").filter({ hasText: "octo/a is being indexed" }).waitFor();
  await page.locator('[data-integration="Octo"] [data-provided="octo/a"]').getByRole("button", { name: "Stop indexing" }).waitFor();
  await shot("integrations");
  await page.locator('[data-integration="Octo"] [data-provided="octo/a"]').getByRole("button", { name: "Stop indexing" }).click();
  await page.getByRole("status").filter({ hasText: "octo/a is no longer indexed" }).waitFor();
  await page.locator('[data-integration="Octo"] [data-provided="octo/a"]').getByRole("button", { name: "Index", exact: true }).waitFor();
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

const newPassword = "Adm1n-pass!2";
await step("the invited user registers from the mailed link", async () => {
  await page.goto(base, { waitUntil: "networkidle" });
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("heading", { name: "Sign in" }).waitFor();
  const invitation = await mailTo("bob@example.com", "invited");
  await page.goto(mailLink(invitation), { waitUntil: "networkidle" });
  await page.getByRole("heading", { name: "Create your account" }).waitFor();
  await page.getByLabel("Name").fill("Bob");
  await page.getByLabel("Email").fill("bob@example.com");
  await page.getByLabel("Password", { exact: true }).fill("B0b-pass!x");
  await page.getByLabel("Confirm password").fill("B0b-pass!x");
  await page.getByRole("button", { name: "Create account" }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
  await page.getByRole("button", { name: "Sign out" }).click();
});

await step("reset the admin's password through a mailed link", async () => {
  await page.getByRole("heading", { name: "Sign in" }).waitFor();
  await page.getByRole("link", { name: "Forgot password?" }).click();
  await page.getByRole("heading", { name: "Reset your password" }).waitFor();
  await page.getByLabel("Email").fill("ada@example.com");
  await page.getByRole("button", { name: "Email me a reset link" }).click();
  await page.getByRole("status").filter({ hasText: "on its way" }).waitFor();
  const reset = await mailTo("ada@example.com", "Reset your Tabby password");
  await page.goto(mailLink(reset), { waitUntil: "networkidle" });
  await page.getByRole("heading", { name: "Choose a new password" }).waitFor();
  await shot("reset-password");
  await page.getByLabel("New password", { exact: true }).fill(newPassword);
  await page.getByLabel("Confirm new password").fill(newPassword);
  await page.getByRole("button", { name: "Set password" }).click();
  await page.getByRole("status").filter({ hasText: "Your password is changed" }).waitFor();
  await page.getByLabel("Email").fill("ada@example.com");
  await page.getByLabel("Password", { exact: true }).fill(newPassword);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
});

await step("a directory user signs in with LDAP", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("heading", { name: "Directory account (LDAP)" }).waitFor();
  await page.getByLabel("User ID").fill("alice");
  await page.getByLabel("Directory password").fill("wrong-Pass1");
  await page.getByRole("button", { name: "Sign in with LDAP" }).click();
  await page.getByRole("alert").filter({ hasText: "Invalid user id or password" }).waitFor();
  await page.getByLabel("Directory password").fill("alice-Pass1");
  await page.getByRole("button", { name: "Sign in with LDAP" }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
  await page.getByRole("link", { name: "Profile" }).click();
  await page.getByText("alice@example.org").first().waitFor();
});

await step("sign in through the OpenID Connect provider", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("link", { name: "Sign in with single sign-on" }).click();
  await page.getByRole("heading", { name: "Ask" }).waitFor();
  if (new URL(page.url()).hash) throw new Error(`the token stayed in the address bar: ${page.url()}`);
  await page.getByRole("link", { name: "Team" }).click();
  await page.getByRole("heading", { name: "Team" }).waitFor();
});

await browser.close();
if (consoleErrors.length) {
  console.error(`console errors:\n${consoleErrors.join("\n")}`);
  process.exit(1);
}
console.log(
  JSON.stringify({ pageWeightBytes: pageWeight, firstLoadRequests, blockedRequests: blocked, screenshots, steps, threadUrl }),
);
