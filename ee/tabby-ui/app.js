// The tabby-rs web UI: a small single-page app over /graphql and /subscriptions.
import { gql, session, subscribe, describe, refreshNow } from "./gql.js";
import { renderMarkdown, escapeHtml, safeUrl } from "./markdown.js";

// ---- DOM helpers ----

/// h("div.class#id", {attrs, onclick}, ...children)
function h(spec, attrs, ...children) {
  const [, tag = "div", rest = ""] = spec.match(/^([a-z0-9]*)(.*)$/i);
  const el = document.createElement(tag || "div");
  for (const part of rest.match(/[.#][^.#]+/g) ?? []) {
    if (part[0] === ".") el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value == null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "html") el.innerHTML = value;
    else if (key === "value") el.value = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const main = () => document.getElementById("main");
/// Replaces the page content (children may be nested arrays, null or strings).
function setMain(...children) {
  const nodes = children.flat(Infinity).filter((c) => c != null && c !== false);
  main().replaceChildren(...nodes);
}
const flash = () => document.getElementById("flash");

function showError(error) {
  const message = error?.errors ? error.errors.map(describe).join("; ") : (error?.message ?? String(error));
  flash().replaceChildren(h("div.error", { role: "alert" }, message));
}
function showNotice(message) {
  flash().replaceChildren(h("div.notice", { role: "status" }, message));
}
function clearFlash() {
  flash().replaceChildren();
}

/// Runs an async action from a button or form, showing its error.
function action(fn) {
  return async (event) => {
    event?.preventDefault?.();
    const button = event?.submitter ?? (event?.currentTarget instanceof HTMLButtonElement ? event.currentTarget : null);
    if (button) button.disabled = true;
    try {
      clearFlash();
      await fn(event);
    } catch (e) {
      showError(e);
    } finally {
      if (button) button.disabled = false;
    }
  };
}

function field(label, input) {
  const id = input.id || `f-${Math.random().toString(36).slice(2)}`;
  input.id = id;
  return h("div.field", h("label", { for: id }, label), input);
}

function formValues(form) {
  return Object.fromEntries(new FormData(form).entries());
}

function when(date) {
  return date ? new Date(date).toLocaleString() : "—";
}

function copy(text) {
  navigator.clipboard?.writeText(text).then(
    () => showNotice("Copied to the clipboard."),
    () => showNotice("Select the text and copy it."),
  );
}

// ---- routing ----

let me = null;
/// What a "related question" button asks (set by the page that shows answers).
let currentAsk = null;
document.addEventListener("tabby:ask", (event) => currentAsk?.(event.detail));
let serverInfo = null;

export function navigate(path, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  render();
}

document.addEventListener("click", (event) => {
  const link = event.target.closest?.("a[data-link]");
  if (!link || event.metaKey || event.ctrlKey || event.shiftKey) return;
  event.preventDefault();
  navigate(link.getAttribute("href"));
});
window.addEventListener("popstate", () => render());
window.addEventListener("tabby:signed-out", () => {
  me = null;
  navigate("/auth/signin", { replace: true });
});

function link(path, text, attrs = {}) {
  return h("a", { href: path, "data-link": true, ...attrs }, text);
}

const ADMIN_PAGES = [
  ["/settings/team", "Team"],
  ["/settings/groups", "Groups"],
  ["/settings/repositories", "Repositories"],
  ["/settings/documents", "Documents"],
  ["/settings/integrations", "Integrations"],
  ["/settings/mail", "Mail"],
  ["/settings/security", "Security"],
  ["/settings/ldap", "LDAP"],
  ["/settings/oauth", "OAuth"],
  ["/jobs", "Jobs"],
  ["/usage", "Usage"],
];

function nav() {
  const here = location.pathname;
  const item = (path, text) =>
    h("li", link(path, text, here === path || (path !== "/" && here.startsWith(path)) ? { "aria-current": "page" } : {}));
  return h(
    "nav.top",
    { "aria-label": "Main" },
    h("a.brand", { href: "/", "data-link": true }, "tabby"),
    h(
      "ul",
      item("/", "Ask"),
      item("/threads", "Threads"),
      item("/browse", "Code"),
      me?.isAdmin ? ADMIN_PAGES.map(([p, t]) => item(p, t)) : item("/usage", "Usage"),
      item("/profile", "Profile"),
    ),
    h(
      "button.link",
      {
        type: "button",
        onclick: () => {
          session.signOut();
          me = null;
          navigate("/auth/signin");
        },
      },
      "Sign out",
    ),
  );
}

async function loadMe() {
  if (!session.access && !session.refresh) return null;
  try {
    const data = await gql(`{ me { id email name isAdmin isOwner authToken } }`);
    return data.me;
  } catch {
    session.clear();
    return null;
  }
}

async function render() {
  const path = location.pathname;
  const params = new URLSearchParams(location.search);
  const embedded = path === "/chat";
  document.body.classList.toggle("embedded", embedded);
  clearFlash();
  try {
    serverInfo ??= (await gql(`{ serverInfo { isAdminInitialized isChatEnabled allowSelfSignup isEmailConfigured } }`)).serverInfo;
  } catch (e) {
    setMain(h("p", "The server cannot be reached."));
    showError(e);
    return;
  }
  if (!serverInfo.isAdminInitialized && path !== "/auth/signup") return navigate("/auth/signup", { replace: true });
  if (path.startsWith("/auth/")) {
    document.getElementById("header").replaceChildren();
    if (path === "/auth/signup") return signUpPage(params);
    if (path === "/auth/forgot-password") return forgotPasswordPage();
    if (path === "/auth/reset-password") return resetPasswordPage(params);
    return signInPage();
  }
  me ??= await loadMe();
  if (!me) return navigate(`/auth/signin?next=${encodeURIComponent(path + location.search)}`, { replace: true });
  document.getElementById("header").replaceChildren(embedded ? "" : nav());
  const routes = [
    [/^\/$/, () => askPage()],
    [/^\/chat$/, () => askPage({ embedded: true })],
    [/^\/threads$/, () => threadsPage()],
    [/^\/browse$/, () => browsePage(params)],
    [/^\/threads\/([^/]+)$/, (m) => threadPage(m[1])],
    [/^\/profile$/, () => profilePage()],
    [/^\/usage$/, () => usagePage()],
    [/^\/settings\/team$/, () => teamPage(), true],
    [/^\/settings\/groups$/, () => groupsPage(), true],
    [/^\/settings\/repositories$/, () => repositoriesPage(), true],
    [/^\/settings\/documents$/, () => documentsPage(), true],
    [/^\/settings\/mail$/, () => mailPage(), true],
    [/^\/settings\/integrations$/, () => integrationsPage(), true],
    [/^\/settings\/security$/, () => securityPage(), true],
    [/^\/settings\/ldap$/, () => ldapPage(), true],
    [/^\/settings\/oauth$/, () => oauthPage(), true],
    [/^\/jobs$/, () => jobsPage(), true],
  ];
  for (const [pattern, page, adminOnly] of routes) {
    const match = path.match(pattern);
    if (!match) continue;
    if (adminOnly && !me.isAdmin) {
      setMain(h("h1", "Not allowed"), h("p", "This page is for admins."));
      return;
    }
    try {
      await page(match);
    } catch (e) {
      showError(e);
    }
    document.title = `${document.querySelector("#main h1")?.textContent ?? "tabby"} · tabby`;
    return;
  }
  setMain(h("h1", "Page not found"), h("p", link("/", "Go to the start page")));
}

// ---- sign in / sign up ----

const OAUTH_NAMES = { OAUTH_GITHUB: ["github", "GitHub"], OAUTH_GOOGLE: ["google", "Google"], OAUTH_GITLAB: ["gitlab", "GitLab"], OAUTH_OIDC: ["oidc", "single sign-on"] };

async function signInPage() {
  // Back from an OAuth provider: the server put a refresh token (or an error) in the
  // fragment; redeem it at once and drop it from the address bar and history.
  const back = new URLSearchParams(location.hash.slice(1));
  if (back.has("refresh_token") || back.has("error")) {
    history.replaceState(null, "", "/auth/signin");
    if (back.has("error")) {
      setTimeout(() => showError({ message: back.get("error") }));
    } else {
      try {
        const data = await gql(`mutation($r: String!) { refreshToken(refreshToken: $r) { accessToken refreshToken } }`, { r: back.get("refresh_token") });
        session.set(data.refreshToken.accessToken, data.refreshToken.refreshToken);
        me = null;
        return navigate("/", { replace: true });
      } catch (e) {
        setTimeout(() => showError(e));
      }
    }
  }
  const providers = (await gql(`{ authProviders { kind } }`).catch(() => ({ authProviders: [] }))).authProviders;
  const oauth = providers.filter((p) => OAUTH_NAMES[p.kind]).map((p) => {
    const [name, label] = OAUTH_NAMES[p.kind];
    return h("a.button", { href: `/oauth/signin?provider=${name}` }, `Sign in with ${label}`);
  });
  const signedIn = (tokens) => {
    session.set(tokens.accessToken, tokens.refreshToken);
    me = null;
    const next = new URLSearchParams(location.search).get("next");
    navigate(next && next.startsWith("/") && !next.startsWith("//") ? next : "/");
  };
  const ldap = providers.some((p) => p.kind === "LDAP")
    ? h("form.card", { onsubmit: action(async () => {
        const v = formValues(ldap);
        const data = await gql(`mutation($u: String!, $p: String!) { tokenAuthLdap(userId: $u, password: $p) { accessToken refreshToken } }`, { u: v.userId, p: v.password });
        signedIn(data.tokenAuthLdap);
      }) },
      h("h2", "Directory account (LDAP)"),
      field("User ID", h("input", { name: "userId", required: true, autocomplete: "username" })),
      field("Directory password", h("input", { name: "password", type: "password", required: true, autocomplete: "current-password" })),
      h("button", { type: "submit" }, "Sign in with LDAP"))
    : null;
  const form = h(
    "form.card",
    {
      onsubmit: action(async () => {
        const { email, password } = formValues(form);
        const data = await gql(
          `mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken refreshToken } }`,
          { e: email, p: password },
        );
        signedIn(data.tokenAuth);
      }),
    },
    h("h1", "Sign in"),
    field("Email", h("input", { name: "email", type: "email", required: true, autocomplete: "username" })),
    field("Password", h("input", { name: "password", type: "password", required: true, autocomplete: "current-password" })),
    h("button.primary", { type: "submit" }, "Sign in"),
    serverInfo.isEmailConfigured ? h("p", link("/auth/forgot-password", "Forgot password?")) : null,
    h("p.muted", serverInfo.allowSelfSignup
      ? ["New here? ", link("/auth/signup", "Sign up"), " with your work e-mail, or ask an admin for an invitation."]
      : "New here? Ask an admin for an invitation link."),
  );
  setMain(form, oauth.length ? h("section.card", h("h2", "Or"), oauth) : null, ldap);
  form.querySelector("input").focus();
}

function signUpPage(params) {
  const first = !serverInfo.isAdminInitialized;
  const code = params.get("invitationCode") ?? "";
  const form = h(
    "form.card",
    {
      onsubmit: action(async () => {
        const v = formValues(form);
        const data = await gql(
          `mutation($e: String!, $p1: String!, $p2: String!, $c: String, $n: String!) {
             register(email: $e, password1: $p1, password2: $p2, invitationCode: $c, name: $n) { accessToken refreshToken } }`,
          { e: v.email, p1: v.password1, p2: v.password2, c: v.invitationCode || null, n: v.name },
        );
        session.set(data.register.accessToken, data.register.refreshToken);
        serverInfo = null;
        me = null;
        navigate("/");
      }),
    },
    h("h1", first ? "Create the admin account" : "Create your account"),
    first ? h("p.muted", "The first account owns this server and administers it.") : null,
    field("Name", h("input", { name: "name", required: true, autocomplete: "name" })),
    field("Email", h("input", { name: "email", type: "email", required: true, autocomplete: "username" })),
    field("Password", h("input", { name: "password1", type: "password", required: true, autocomplete: "new-password" })),
    h("p.muted.small", "8 to 20 characters with a lowercase and an uppercase letter, a digit and a symbol."),
    field("Confirm password", h("input", { name: "password2", type: "password", required: true, autocomplete: "new-password" })),
    first ? null : field("Invitation code", h("input", { name: "invitationCode", value: code })),
    h("button.primary", { type: "submit" }, first ? "Create admin account" : "Create account"),
    first ? null : h("p.muted", link("/auth/signin", "Already have an account? Sign in")),
  );
  // No code yet: an address of an allowed domain can have one mailed.
  const request = !first && !code && serverInfo.allowSelfSignup && serverInfo.isEmailConfigured
    ? h("form.card", { onsubmit: action(async () => {
        const { email } = formValues(request);
        await gql(`mutation($e: String!) { requestInvitationEmail(input: {email: $e}) { email } }`, { e: email });
        showNotice(`An invitation is on its way to ${email}: follow its link to create your account.`);
      }) },
      h("h2", "No invitation yet?"),
      h("p.muted", "Addresses of this organisation's domains can have one mailed to them."),
      field("Work email", h("input", { name: "email", type: "email", required: true })),
      h("button", { type: "submit" }, "Email me an invitation"))
    : null;
  setMain(form, request);
  form.querySelector("input").focus();
}

function forgotPasswordPage() {
  const form = h("form.card", { onsubmit: action(async () => {
    const { email } = formValues(form);
    await gql(`mutation($e: String!) { requestPasswordResetEmail(input: {email: $e}) }`, { e: email });
    showNotice("If an account has this address, a link to choose a new password is on its way. It works once, for an hour.");
  }) },
    h("h1", "Reset your password"),
    field("Email", h("input", { name: "email", type: "email", required: true, autocomplete: "username" })),
    h("button.primary", { type: "submit" }, "Email me a reset link"),
    h("p.muted", link("/auth/signin", "Back to sign in")),
  );
  setMain(form);
  form.querySelector("input").focus();
}

function resetPasswordPage(params) {
  const code = params.get("code") ?? "";
  const form = h("form.card", { onsubmit: action(async () => {
    const v = formValues(form);
    await gql(`mutation($c: String!, $p1: String!, $p2: String!) { passwordReset(input: {code: $c, password1: $p1, password2: $p2}) }`,
      { c: code, p1: v.password1, p2: v.password2 });
    session.clear();
    me = null;
    navigate("/auth/signin", { replace: true });
    showNotice("Your password is changed: sign in with it. Every other session was signed out.");
  }) },
    h("h1", "Choose a new password"),
    code ? null : h("p.error", "This link has no reset code: open the link from the mail again."),
    field("New password", h("input", { name: "password1", type: "password", required: true, autocomplete: "new-password" })),
    h("p.muted.small", "8 to 20 characters with a lowercase and an uppercase letter, a digit and a symbol."),
    field("Confirm new password", h("input", { name: "password2", type: "password", required: true, autocomplete: "new-password" })),
    h("button.primary", { type: "submit", disabled: !code }, "Set password"),
  );
  setMain(form);
  form.querySelector("input").focus();
}

// ---- the Answer Engine ----

const RUN_FIELDS = `
  __typename
  ... on ThreadCreated { id }
  ... on ThreadUserMessageCreated { id }
  ... on ThreadAssistantMessageCreated { id }
  ... on ThreadAssistantMessageReadingCode { snippet fileList }
  ... on ThreadAssistantMessageAttachmentsCodeFileList { files: fileList truncated }
  ... on ThreadAssistantMessageAttachmentsCode {
    hits { code { gitUrl commit filepath language content startLine reason } scores { rrf } }
  }
  ... on ThreadAssistantMessageReadingDoc { sourceIds }
  ... on ThreadAssistantMessageAttachmentsDoc { hits { score doc { ${docFields()} } } }
  ... on ThreadRelevantQuestions { questions }
  ... on ThreadAssistantMessageContentDelta { delta }
`;

function docFields() {
  return `__typename
    ... on MessageAttachmentWebDoc { title link content }
    ... on MessageAttachmentCommitDoc { sha message authorAt }
    ... on MessageAttachmentIngestedDoc { title body docLink: link }`;
}

function fileLink(code) {
  const end = code.startLine != null ? code.startLine + code.content.split("\n").length - 1 : null;
  const label = code.startLine != null ? `${code.filepath}:${code.startLine}-${end}` : code.filepath;
  if (/^https?:\/\//.test(code.gitUrl)) {
    const lines = code.startLine != null ? `#L${code.startLine}-L${end}` : "";
    return h("a", { href: `${code.gitUrl}/blob/${code.commit || "HEAD"}/${code.filepath}${lines}`, target: "_blank", rel: "noopener noreferrer" }, label);
  }
  return h("span.path", label);
}

/// A snippet's link and, for evidence-pack items, why it was retrieved.
function codeView(code) {
  return h("span", fileLink(code), code.reason ? h("small.muted.reason", ` — ${code.reason}`) : null);
}

/// A document's link, or its title alone when the link is missing or not a safe URL.
function docLink(url, title) {
  const href = url ? safeUrl(url) : null;
  return href ? h("a", { href, target: "_blank", rel: "noopener noreferrer" }, title) : h("span", title);
}

function docView(doc) {
  switch (doc.__typename) {
    case "MessageAttachmentWebDoc":
      return h("span", docLink(doc.link, doc.title || doc.link));
    case "MessageAttachmentCommitDoc":
      return h("span", h("code", doc.sha.slice(0, 10)), " ", doc.message.split("\n")[0]);
    case "MessageAttachmentIngestedDoc":
      return docLink(doc.docLink, doc.title);
    default:
      return h("span", "document");
  }
}

/// The view of one assistant answer, updated as items arrive.
function answerView({ onQuestion } = {}) {
  const status = h("p.status", { "aria-live": "polite" });
  const attachments = h("div.attachments");
  const content = h("div.answer.markdown", { "aria-live": "polite" });
  const questions = h("div.questions");
  const root = h("section.turn-answer", status, attachments, content, questions);
  let text = "";
  let citations = [];
  let pending = false;
  const paint = () => {
    pending = false;
    content.innerHTML = renderMarkdown(text, {
      citation: (n) => `<sup class="cite" title="${escapeHtml(citations[n - 1] ?? "")}">[${n}]</sup>`,
    });
  };
  const list = (title, items) => {
    if (!items.length) return;
    attachments.append(h("details.attachment", { open: true }, h("summary", title), h("ul", items.map((i) => h("li", i)))));
  };
  return {
    root,
    setStatus(message) {
      status.textContent = message;
    },
    code(hits) {
      citations.push(...hits.map((hit) => hit.code.filepath));
      list(`Read ${hits.length} code snippet${hits.length === 1 ? "" : "s"}`, hits.map((hit) => codeView(hit.code)));
    },
    files(files, truncated) {
      list(`Read the file list (${files.length}${truncated ? "+" : ""} files)`, files.slice(0, 20).map((f) => h("span.path", f)));
    },
    docs(hits) {
      citations.push(...hits.map((hit) => hit.doc.title ?? hit.doc.sha ?? ""));
      list(`Read ${hits.length} document${hits.length === 1 ? "" : "s"}`, hits.map((hit) => docView(hit.doc)));
    },
    delta(piece) {
      text += piece;
      if (!pending) {
        pending = true;
        requestAnimationFrame(paint);
      }
    },
    setText(full) {
      text = full;
      paint();
    },
    questions(list) {
      questions.replaceChildren(
        ...(list.length ? [h("p.muted", "Related questions")] : []),
        ...list.map((q) => h("button.chip", { type: "button", onclick: () => onQuestion?.(q) }, q)),
      );
    },
  };
}

async function contextPickers() {
  const data = await gql(
    `{ repositoryList { sourceId name gitUrl } customWebDocuments(first: 100) { edges { node { sourceId name } } } }`,
  );
  const repos = h(
    "select",
    { name: "repository" },
    h("option", { value: "" }, "No repository"),
    data.repositoryList.map((r) => h("option", { value: r.sourceId }, r.name)),
  );
  if (data.repositoryList.length === 1) repos.value = data.repositoryList[0].sourceId;
  const docs = data.customWebDocuments.edges.map(({ node }) =>
    h("label.check", h("input", { type: "checkbox", name: "doc", value: node.sourceId }), node.name),
  );
  return {
    element: h(
      "div.pickers",
      field("Code", repos),
      docs.length ? h("fieldset", h("legend", "Docs"), docs) : null,
      h("label.check", h("input", { type: "checkbox", name: "related" }), "Suggest related questions"),
    ),
    options(question) {
      const options = {};
      if (repos.value) options.codeQuery = { sourceId: repos.value, content: question };
      const sourceIds = [...this.element.querySelectorAll('input[name="doc"]:checked')].map((i) => i.value);
      if (repos.value) sourceIds.push(repos.value);
      if (sourceIds.length > (repos.value ? 1 : 0)) options.docQuery = { content: question, searchPublic: false, sourceIds };
      if (this.element.querySelector('input[name="related"]').checked) options.generateRelevantQuestions = true;
      return options;
    },
  };
}

function askBox(onAsk, placeholder = "Ask about your code…") {
  const input = h("textarea", { name: "question", rows: 3, placeholder, required: true, "aria-label": "Question" });
  const form = h(
    "form.ask",
    {
      onsubmit: (event) => {
        event.preventDefault();
        const question = input.value.trim();
        if (!question) return;
        input.value = "";
        onAsk(question);
      },
    },
    input,
    h("button.primary", { type: "submit" }, "Ask"),
  );
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  return { form, input };
}

/// Streams one run into `turns`; resolves with the thread id.
function runThread({ threadId, question, options, turns }) {
  return new Promise((resolve) => {
    turns.append(h("section.turn-question", h("p", question)));
    const view = answerView({ onQuestion: (q) => document.dispatchEvent(new CustomEvent("tabby:ask", { detail: q })) });
    turns.append(view.root);
    view.setStatus("Thinking…");
    let id = threadId;
    const query = threadId
      ? `subscription($input: CreateThreadRunInput!) { createThreadRun(input: $input) { ${RUN_FIELDS} } }`
      : `subscription($input: CreateThreadAndRunInput!) { createThreadAndRun(input: $input) { ${RUN_FIELDS} } }`;
    const input = threadId
      ? { threadId, additionalUserMessage: { content: question }, options }
      : { thread: { userMessage: { content: question } }, options };
    subscribe(query, { input }, {
      onNext(data) {
        const item = data.createThreadAndRun ?? data.createThreadRun;
        switch (item.__typename) {
          case "ThreadCreated":
            id = item.id;
            break;
          case "ThreadAssistantMessageReadingCode":
            view.setStatus("Reading code…");
            break;
          case "ThreadAssistantMessageAttachmentsCodeFileList":
            view.files(item.files, item.truncated);
            break;
          case "ThreadAssistantMessageAttachmentsCode":
            view.code(item.hits);
            break;
          case "ThreadAssistantMessageReadingDoc":
            view.setStatus("Reading docs…");
            break;
          case "ThreadAssistantMessageAttachmentsDoc":
            view.docs(item.hits);
            break;
          case "ThreadRelevantQuestions":
            view.questions(item.questions);
            break;
          case "ThreadAssistantMessageContentDelta":
            view.setStatus("");
            view.delta(item.delta);
            break;
        }
      },
      onError(error) {
        view.setStatus("");
        showError(error);
        resolve(id);
      },
      onComplete() {
        view.setStatus("");
        resolve(id);
      },
    });
  });
}

async function askPage({ embedded = false } = {}) {
  if (!serverInfo.isChatEnabled) {
    setMain(h("h1", "Ask"), h("p", "The Answer Engine needs a chat model; this server has none. Configure [model.chat] or run `tabby download`."));
    return;
  }
  const pickers = await contextPickers();
  const turns = h("div.turns");
  const history = embedded ? null : h("aside.history", { "aria-label": "Recent threads" });
  let threadId = null;
  const ask = async (question) => {
    const options = pickers.options(question);
    threadId = await runThread({ threadId, question, options, turns });
    if (threadId && !embedded) {
      history?.replaceChildren(await recentThreads());
      history.prepend(h("h2", "Recent"));
      history.querySelector(`a[href="/threads/${threadId}"]`)?.setAttribute("aria-current", "page");
      window.history.replaceState(null, "", `/threads/${threadId}`);
    }
  };
  const box = askBox(ask);
  currentAsk = ask;
  // "Ask about this file" from the code browser: the repository picked, the question ready.
  const wanted = new URLSearchParams(location.search);
  if (wanted.get("source")) pickers.element.querySelector('select[name="repository"]').value = wanted.get("source");
  if (wanted.get("q")) box.form.querySelector("textarea").value = wanted.get("q");
  setMain(
    h(
      "div.ask-layout",
      history,
      h("div.conversation", h("h1", embedded ? "Chat" : "Ask"), pickers.element, turns, box.form),
    ),
  );
  if (history) {
    history.replaceChildren(h("h2", "Recent"), await recentThreads());
  }
  box.input.focus();
}

async function recentThreads() {
  const data = await gql(`{ myThreads(last: 20) { edges { node { id createdAt } } } }`);
  const threads = data.myThreads.edges.map((e) => e.node).reverse();
  if (!threads.length) return h("p.muted", "No threads yet.");
  const firsts = await Promise.all(
    threads.map((t) =>
      gql(`query($id: ID!) { threadMessages(threadId: $id, first: 1) { edges { node { content } } } }`, { id: t.id })
        .then((d) => d.threadMessages.edges[0]?.node.content ?? "(empty)")
        .catch(() => "(unreadable)"),
    ),
  );
  return h("ul.thread-list", threads.map((t, i) => h("li", link(`/threads/${t.id}`, firsts[i].slice(0, 80)), h("small.muted", when(t.createdAt)))));
}

async function threadsPage() {
  setMain(h("h1", "Threads"), await recentThreads());
}

async function threadPage(id) {
  const data = await gql(
    `query($id: ID!) { threadMessages(threadId: $id, first: 200) { edges { node {
        id role content
        attachment {
          code { gitUrl commit filepath language content startLine reason }
          doc { ${docFields()} }
          codeFileList { fileList truncated }
        }
      } } } }`,
    { id },
  );
  const turns = h("div.turns");
  for (const { node } of data.threadMessages.edges) {
    if (node.role === "USER") {
      turns.append(h("section.turn-question", h("p", node.content)));
    } else {
      const view = answerView();
      if (node.attachment.codeFileList) view.files(node.attachment.codeFileList.fileList, node.attachment.codeFileList.truncated);
      if (node.attachment.code.length) view.code(node.attachment.code.map((code) => ({ code })));
      if (node.attachment.doc.length) view.docs(node.attachment.doc.map((doc) => ({ doc })));
      view.setText(node.content);
      turns.append(view.root);
    }
  }
  const pickers = await contextPickers();
  const followUp = (question) => runThread({ threadId: id, question, options: pickers.options(question), turns });
  currentAsk = followUp;
  const box = askBox(followUp, "Ask a follow-up…");
  setMain(
    h("div.conversation", h("h1", "Thread"), turns, pickers.element, box.form,
      h("p", h("button.link", { type: "button", onclick: action(async () => {
        await gql(`mutation($id: ID!) { setThreadPersisted(threadId: $id) }`, { id });
        showNotice("Kept: this thread will not be removed after 7 idle days.");
      }) }, "Keep this thread"))),
  );
}

// ---- code browser ----

/// A REST GET with the session's token (refreshed once on a 401).
async function authedFetch(url) {
  let response = await fetch(url, { headers: { authorization: `Bearer ${session.access}` } });
  if (response.status === 401 && (await refreshNow().catch(() => false))) {
    response = await fetch(url, { headers: { authorization: `Bearer ${session.access}` } });
  }
  return response;
}

const REPO_KIND_PATH = { GIT: "git", GIT_CONFIG: "gitconfig" };

async function browsePage(params) {
  const repos = (await gql(`{ repositoryList { id kind name sourceId refs { name } } }`)).repositoryList
    .filter((r) => REPO_KIND_PATH[r.kind]);
  if (!repos.length) {
    setMain(h("h1", "Code"), h("p.muted", "No repository you may read has been added yet."));
    return;
  }
  const repo = repos.find((r) => r.id === params.get("id") && r.kind === params.get("kind")) ?? repos[0];
  const rev = params.get("rev") || repo.refs[0]?.name || "";
  const path = params.get("path") ?? "";
  const line = Number(params.get("line")) || null;
  const here = (changes) => {
    const q = new URLSearchParams({ kind: repo.kind, id: repo.id, rev, path, ...changes });
    if (!q.get("line")) q.delete("line");
    return `/browse?${q}`;
  };
  const base = `/repositories/${REPO_KIND_PATH[repo.kind]}/${encodeURIComponent(repo.id)}/${rev ? `rev/${encodeURIComponent(rev)}` : "resolve"}/`;
  const picker = h("select", { "aria-label": "Repository", onchange: (e) => {
    const r = repos[Number(e.target.value)];
    navigate(`/browse?kind=${r.kind}&id=${encodeURIComponent(r.id)}`);
  } }, repos.map((r, i) => h("option", { value: i, selected: r === repo }, r.name)));
  const grep = h("form.inline", { onsubmit: action(async () => {
    const { query } = formValues(grep);
    const data = await gql(`query($k: RepositoryKind!, $id: ID!, $rev: String, $q: String!) {
      repositoryGrep(kind: $k, id: $id, rev: $rev, query: $q) { elapsedMs truncated files { path lines { lineNumber text } } } }`,
      { k: repo.kind, id: repo.id, rev: rev || null, q: query });
    const out = data.repositoryGrep;
    results.replaceChildren(
      h("p.muted", `${out.files.length} files in ${out.elapsedMs} ms${out.truncated ? ` (stopped: ${out.truncated})` : ""}`),
      ...out.files.map((f) => h("div.grep-file", h("h3", link(here({ path: f.path }), f.path)),
        f.lines.map((l) => h("div.grep-line", link(here({ path: f.path, line: String(l.lineNumber) }), String(l.lineNumber)), " ", h("code", l.text))))),
    );
  }) }, field("Search this repository (regex; f: path, lang: language, - negates)", h("input", { name: "query", required: true })), h("button", { type: "submit" }, "Search"));
  const results = h("section.grep-results", { "aria-label": "Search results" });
  const crumbs = [link(here({ path: "" }), repo.name)];
  let acc = "";
  for (const part of path.split("/").filter(Boolean)) {
    acc = acc ? `${acc}/${part}` : part;
    crumbs.push(" / ", link(here({ path: acc }), part));
  }
  const view = h("section.card.file-view");
  const response = await authedFetch(base + path.split("/").map(encodeURIComponent).join("/"));
  if (!response.ok) {
    view.append(h("p.error", (await response.json().catch(() => ({}))).error ?? `Cannot open ${path || "the repository"} (${response.status})`));
  } else if ((response.headers.get("content-type") ?? "").startsWith("application/vnd.directory+json")) {
    const { entries } = await response.json();
    view.append(h("ul.tree", entries.map((e) => h("li", { "data-kind": e.kind },
      link(here({ path: e.basename }), `${e.basename.split("/").pop()}${e.kind === "dir" ? "/" : ""}`)))));
  } else if ((response.headers.get("content-type") ?? "").startsWith("text/plain")) {
    const text = await response.text();
    const question = `Explain ${path} in ${repo.name}: what it does and how it is used.`;
    view.append(
      h("p", h("a", { href: `/?source=${encodeURIComponent(repo.sourceId)}&q=${encodeURIComponent(question)}`, "data-link": true }, "Ask about this file")),
      h("pre.code-lines", text.split("\n").map((l, i) => h("div", { id: `L${i + 1}`, class: i + 1 === line ? "hit" : null }, h("span.ln", String(i + 1)), l))),
    );
  } else {
    view.append(h("p.muted", "A binary file."));
  }
  setMain(h("h1", "Code"), h("div.pickers", field("Repository", picker), rev ? h("span.muted", `at ${rev}`) : null), grep, results, h("nav.crumbs", { "aria-label": "Path" }, crumbs), view);
  if (line) document.getElementById(`L${line}`)?.scrollIntoView({ block: "center" });
}

// ---- profile ----

async function profilePage() {
  const token = h("code.token", me.authToken);
  setMain(
    h("h1", "Profile"),
    h("section.card",
      h("h2", "Editor token"),
      h("p", "Editor plugins (VS Code, JetBrains, Vim) connect with this token. Set the server endpoint to ",
        h("code", location.origin), " and the token below in the plugin's settings (or ",
        h("code", "[server] token"), " in ", h("code", "~/.tabby-client/agent/config.toml"), ")."),
      h("p", token),
      h("button", { type: "button", onclick: () => copy(me.authToken) }, "Copy"),
      " ",
      h("button", { type: "button", onclick: action(async () => {
        if (!confirm("Reset the token? Editors using the old one stop working.")) return;
        await gql(`mutation { resetUserAuthToken }`);
        me = await loadMe();
        token.textContent = me.authToken;
        showNotice("A new token was issued.");
      }) }, "Reset token"),
    ),
    (() => {
      const form = h("form.card", { onsubmit: action(async () => {
        const v = formValues(form);
        await gql(`mutation($i: PasswordChangeInput!) { passwordChange(input: $i) }`, {
          i: { oldPassword: v.old || null, newPassword1: v.new1, newPassword2: v.new2 },
        });
        // Changing the password ends every session, this one too: sign in again with it.
        const data = await gql(
          `mutation($e: String!, $p: String!) { tokenAuth(email: $e, password: $p) { accessToken refreshToken } }`,
          { e: me.email, p: v.new1 },
        );
        session.set(data.tokenAuth.accessToken, data.tokenAuth.refreshToken);
        form.reset();
        showNotice("Password changed. Every other session was signed out.");
      }) },
        h("h2", "Password"),
        field("Current password", h("input", { name: "old", type: "password", autocomplete: "current-password" })),
        field("New password", h("input", { name: "new1", type: "password", required: true, autocomplete: "new-password" })),
        field("Confirm new password", h("input", { name: "new2", type: "password", required: true, autocomplete: "new-password" })),
        h("button", { type: "submit" }, "Change password"));
      return form;
    })(),
    h("p.muted", `Signed in as ${me.email}${me.isAdmin ? " (admin)" : ""}.`),
  );
}

// ---- admin: team ----

async function teamPage() {
  const data = await gql(`{
    users(first: 500) { edges { node { id email name isAdmin isOwner active createdAt } } }
    invitations(first: 500) { edges { node { id email code createdAt } } }
  }`);
  const invite = h("form.inline", { onsubmit: action(async () => {
    const { email } = formValues(invite);
    await gql(`mutation($e: String!) { createInvitation(email: $e) }`, { e: email });
    await teamPage();
    showNotice(serverInfo?.isEmailConfigured
      ? `Invitation mailed to ${email}; the link below works too.`
      : `Invitation created for ${email}: send them the link below.`);
  }) }, field("Email", h("input", { name: "email", type: "email", required: true })), h("button.primary", { type: "submit" }, "Invite"));
  const users = data.users.edges.map((e) => e.node);
  setMain(
    h("h1", "Team"),
    h("section.card", h("h2", "Invite"), invite,
      data.invitations.edges.length
        ? h("table", h("thead", h("tr", h("th", "Email"), h("th", "Invitation link"), h("th", ""))),
            h("tbody", data.invitations.edges.map(({ node }) => {
              const url = `${location.origin}/auth/signup?invitationCode=${encodeURIComponent(node.code)}`;
              return h("tr", h("td", node.email), h("td", h("code.small", url), " ", h("button.link", { type: "button", onclick: () => copy(url) }, "Copy")),
                h("td", h("button.link", { type: "button", onclick: action(async () => {
                  await gql(`mutation($id: ID!) { deleteInvitation(id: $id) }`, { id: node.id });
                  await teamPage();
                }) }, "Delete")));
            })))
        : h("p.muted", "No open invitations.")),
    h("section.card", h("h2", "Members"),
      h("table", h("thead", h("tr", h("th", "Name"), h("th", "Email"), h("th", "Role"), h("th", "Status"), h("th", "Actions"))),
        h("tbody", users.map((u) => h("tr",
          h("td", u.name || "—"), h("td", u.email),
          h("td", u.isOwner ? "Owner" : u.isAdmin ? "Admin" : "Member"),
          h("td", u.active ? "Active" : "Inactive"),
          h("td", u.isOwner || u.id === me.id ? "" : [
            h("button.link", { type: "button", onclick: action(async () => {
              await gql(`mutation($id: ID!, $a: Boolean!) { updateUserRole(id: $id, isAdmin: $a) }`, { id: u.id, a: !u.isAdmin });
              await teamPage();
            }) }, u.isAdmin ? "Make member" : "Make admin"),
            " ",
            h("button.link", { type: "button", onclick: action(async () => {
              await gql(`mutation($id: ID!, $a: Boolean!) { updateUserActive(id: $id, active: $a) }`, { id: u.id, a: !u.active });
              await teamPage();
            }) }, u.active ? "Deactivate" : "Activate"),
            " ",
            me.isOwner || !u.isAdmin ? h("button.link", { type: "button", onclick: action(async () => {
              const data = await gql(`mutation($id: ID!) { generateResetPasswordUrl(userId: $id) }`, { id: u.id });
              copy(data.generateResetPasswordUrl);
              showNotice(`A reset link for ${u.email} is on the clipboard (single use, valid for an hour): ${data.generateResetPasswordUrl}`);
            }) }, "Reset link") : null,
          ]),
        ))))),
  );
}

// ---- admin: integrations ----

const INTEGRATION_KINDS = [["GITHUB", "GitHub"], ["GITLAB", "GitLab"], ["GITHUB_SELF_HOSTED", "GitHub Enterprise Server"], ["GITLAB_SELF_HOSTED", "Self-hosted GitLab"]];

async function integrationsPage() {
  const data = await gql(`{
    integrations { edges { node { id kind displayName apiBase status message } } }
    integratedRepositories(first: 500) { edges { node { id integrationId displayName gitUrl active jobInfo { lastJobRun { ${JOB_RUN_FIELDS} } } } } }
  }`);
  const cells = new Map();
  const repos = data.integratedRepositories.edges.map((e) => e.node);
  const form = h("form.card", { onsubmit: action(async () => {
    const v = formValues(form);
    await gql(`mutation($i: CreateIntegrationInput!) { createIntegration(input: $i) }`, { i: {
      kind: v.kind, displayName: v.displayName, accessToken: v.accessToken, apiBase: v.apiBase || null,
    } });
    await integrationsPage();
    showNotice("Integration added: its repositories are being listed.");
  }) },
    h("h2", "Connect GitHub or GitLab"),
    field("Kind", select("kind", INTEGRATION_KINDS, "GITHUB")),
    field("Integration name", h("input", { name: "displayName", required: true })),
    field("Access token", h("input", { name: "accessToken", type: "password", required: true, autocomplete: "off" })),
    h("p.muted.small", "GitHub: a token with the repo scope. GitLab: a token with read_api (group projects and subgroups are included)."),
    field("API base URL (self-hosted only)", h("input", { name: "apiBase", type: "url", placeholder: "https://gitlab.example.com" })),
    h("button.primary", { type: "submit" }, "Add integration"),
  );
  setMain(h("h1", "Integrations"), form,
    data.integrations.edges.map(({ node }) => h("section.card", { "data-integration": node.displayName },
      h("h2", node.displayName, " ", h(`span.badge.${node.status === "READY" ? "ok" : node.status === "FAILED" ? "bad" : "pending"}`, node.status.toLowerCase())),
      h("p.muted", `${INTEGRATION_KINDS.find(([k]) => k === node.kind)?.[1] ?? node.kind} · ${node.apiBase}`),
      node.message ? h("p.error", node.message) : null,
      h("table", h("tbody", repos.filter((r) => r.integrationId === node.id).map((r) => h("tr", { "data-provided": r.displayName },
        h("td", h("strong", r.displayName), h("br"), h("small.muted", r.gitUrl)),
        r.active ? statusCell(r.jobInfo.lastJobRun, cells) : h("td.muted", "not indexed"),
        h("td", h("button", { type: "button", onclick: action(async () => {
          await gql(`mutation($id: ID!, $a: Boolean!) { updateIntegratedRepositoryActive(id: $id, active: $a) }`, { id: r.id, a: !r.active });
          await integrationsPage();
          showNotice(r.active ? `${r.displayName} is no longer indexed.` : `${r.displayName} is being indexed: code, issues and pull requests.`);
        }) }, r.active ? "Stop indexing" : "Index")))))),
      h("p.muted.small", "Indexed repositories are context for completions, search and the Answer Engine, under the read policies set on the Repositories page."),
      h("button", { type: "button", onclick: action(async () => {
        await gql(`mutation($c: String!) { triggerJobRun(command: $c) }`, { c: JSON.stringify({ SyncThirdPartyRepositories: node.id }) });
        showNotice("Sync started.");
      }) }, "Sync now"),
      " ",
      h("button.link.danger", { type: "button", onclick: action(async () => {
        await gql(`mutation($id: ID!, $k: IntegrationKind!) { deleteIntegration(id: $id, kind: $k) }`, { id: node.id, k: node.kind });
        await integrationsPage();
      }) }, "Remove"))));
  watchRuns(cells);
}

// ---- admin: mail and security ----

const ENCRYPTIONS = [["START_TLS", "STARTTLS (port 587)"], ["SSL_TLS", "TLS (port 465)"], ["NONE", "None (local relay only)"]];
const AUTH_METHODS = [["PLAIN", "PLAIN"], ["LOGIN", "LOGIN"], ["NONE", "None"]];

function select(name, options, current, attrs = {}) {
  return h("select", { name, ...attrs }, options.map(([value, label]) => h("option", { value, selected: value === current }, label)));
}

async function mailPage() {
  const data = await gql(`{
    emailSetting { smtpUsername smtpServer smtpPort fromAddress encryption authMethod
                   pendingDeliveries failedDeliveries lastDeliveryError }
    networkSetting { externalUrl }
  }`);
  const current = data.emailSetting;
  const form = h("form.card", { onsubmit: action(async () => {
    const v = formValues(form);
    await gql(`mutation($i: EmailSettingInput!) { updateEmailSetting(input: $i) }`, { i: {
      smtpServer: v.smtpServer, smtpPort: Number(v.smtpPort), encryption: v.encryption, authMethod: v.authMethod,
      smtpUsername: v.smtpUsername, smtpPassword: v.smtpPassword === "" ? null : v.smtpPassword, fromAddress: v.fromAddress,
    } });
    serverInfo = null;
    await mailPage();
    showNotice("Mail settings saved. Send a test mail to check them.");
  }) },
    h("h2", "SMTP server"),
    field("SMTP server", h("input", { name: "smtpServer", required: true, value: current?.smtpServer ?? "", placeholder: "smtp.example.com" })),
    field("Port", h("input", { name: "smtpPort", type: "number", min: 1, max: 65535, required: true, value: current?.smtpPort ?? 587 })),
    field("Encryption", select("encryption", ENCRYPTIONS, current?.encryption ?? "START_TLS")),
    field("Authentication", select("authMethod", AUTH_METHODS, current?.authMethod ?? "PLAIN")),
    field("SMTP user name", h("input", { name: "smtpUsername", value: current?.smtpUsername ?? "", autocomplete: "off" })),
    field("SMTP password", h("input", { name: "smtpPassword", type: "password", autocomplete: "new-password",
      placeholder: current ? "unchanged (stored encrypted)" : "" })),
    field("Sender address", h("input", { name: "fromAddress", type: "email", required: true, value: current?.fromAddress ?? "" })),
    h("button.primary", { type: "submit" }, "Save mail settings"),
    current ? [" ", h("button.link.danger", { type: "button", onclick: action(async () => {
      await gql(`mutation { deleteEmailSetting }`);
      serverInfo = null;
      await mailPage();
      showNotice("Mail is turned off.");
    }) }, "Turn mail off")] : null,
  );
  const test = h("form.inline", { onsubmit: action(async () => {
    const { to } = formValues(test);
    await gql(`mutation($to: String!) { sendTestEmail(to: $to) }`, { to });
    showNotice(`The SMTP server accepted a test mail to ${to}.`);
    await mailPage();
  }) }, field("Send a test mail to", h("input", { name: "to", type: "email", required: true, value: me.email })), h("button", { type: "submit" }, "Send test mail"));
  const network = h("form.inline", { onsubmit: action(async () => {
    const { externalUrl } = formValues(network);
    await gql(`mutation($u: String!) { updateNetworkSetting(input: {externalUrl: $u}) }`, { u: externalUrl });
    showNotice("Links in mails now start with this address.");
  }) }, field("External URL", h("input", { name: "externalUrl", type: "url", required: true, value: data.networkSetting.externalUrl })),
    h("button", { type: "submit" }, "Save URL"));
  setMain(
    h("h1", "Mail"),
    h("p.muted", "Invitations, password resets and failed jobs are mailed. Mails are sent in the background and retried while the SMTP server is unreachable."),
    form,
    current ? h("section.card", h("h2", "Delivery"),
      test,
      h("p", `Waiting or being retried: ${current.pendingDeliveries}. Given up in the last 7 days: ${current.failedDeliveries}.`),
      current.lastDeliveryError ? h("p.error", { "data-delivery-error": true }, `Last error: ${current.lastDeliveryError}`) : null) : null,
    h("section.card", h("h2", "Links"), h("p.muted", "The address users reach this server at; links in mails start with it."), network),
  );
}

async function securityPage() {
  const data = await gql(`{ securitySetting { allowedRegisterDomainList disableClientSideTelemetry disablePasswordLogin } }`);
  const current = data.securitySetting;
  const form = h("form.card", { onsubmit: action(async () => {
    const v = formValues(form);
    const domains = (v.domains ?? "").split(/[\s,]+/).filter(Boolean);
    await gql(`mutation($i: SecuritySettingInput!) { updateSecuritySetting(input: $i) }`, { i: {
      allowedRegisterDomainList: domains,
      disableClientSideTelemetry: v.telemetry === "on",
      disablePasswordLogin: v.passwordOff === "on",
    } });
    serverInfo = null;
    await securityPage();
    showNotice("Security settings saved.");
  }) },
    field("Self sign-up domains", h("textarea", { name: "domains", rows: 3, placeholder: "example.com" }, current.allowedRegisterDomainList.join("\n"))),
    h("p.muted.small", "Addresses of these domains can have an invitation mailed to them from the sign-up page (mail must be set up). One per line; empty: invitations by admins only."),
    h("label.check", h("input", { type: "checkbox", name: "telemetry", checked: current.disableClientSideTelemetry }), " Disable client-side telemetry"),
    h("label.check", h("input", { type: "checkbox", name: "passwordOff", checked: current.disablePasswordLogin }), " Disable password sign-in"),
    h("p.muted.small", "Password sign-in can only be turned off once another sign-in method works for an admin."),
    h("button.primary", { type: "submit" }, "Save security settings"),
  );
  setMain(h("h1", "Security"), form);
}

const LDAP_ENCRYPTIONS = [["NONE", "None"], ["START_TLS", "StartTLS (port 389)"], ["LDAPS", "LDAPS (port 636)"]];

async function ldapPage() {
  const current = (await gql(`{ ldapCredential { host port bindDn baseDn userFilter encryption skipTlsVerify emailAttribute nameAttribute } }`)).ldapCredential;
  const values = () => {
    const v = formValues(form);
    return {
      host: v.host, port: Number(v.port), bindDn: v.bindDn, bindPassword: v.bindPassword === "" ? null : v.bindPassword,
      baseDn: v.baseDn, userFilter: v.userFilter, encryption: v.encryption, skipTlsVerify: v.skipTlsVerify === "on",
      emailAttribute: v.emailAttribute, nameAttribute: v.nameAttribute || null,
    };
  };
  const form = h("form.card", { onsubmit: action(async () => {
    await gql(`mutation($i: UpdateLdapCredentialInput!) { updateLdapCredential(input: $i) }`, { i: values() });
    await ldapPage();
    showNotice("LDAP settings saved: directory users can sign in on the sign-in page.");
  }) },
    field("LDAP host", h("input", { name: "host", required: true, value: current?.host ?? "", placeholder: "ldap.example.com" })),
    field("LDAP port", h("input", { name: "port", type: "number", min: 1, max: 65535, required: true, value: current?.port ?? 389 })),
    field("Connection security", select("encryption", LDAP_ENCRYPTIONS, current?.encryption ?? "START_TLS")),
    h("label.check", h("input", { type: "checkbox", name: "skipTlsVerify", checked: current?.skipTlsVerify }), " Skip TLS certificate verification (test directories only)"),
    field("Bind DN", h("input", { name: "bindDn", value: current?.bindDn ?? "", placeholder: "cn=tabby,ou=services,dc=example,dc=com" })),
    field("Bind password", h("input", { name: "bindPassword", type: "password", autocomplete: "new-password", placeholder: current ? "unchanged (stored encrypted)" : "" })),
    field("Base DN", h("input", { name: "baseDn", required: true, value: current?.baseDn ?? "", placeholder: "dc=example,dc=com" })),
    field("User filter", h("input", { name: "userFilter", required: true, value: current?.userFilter ?? "(uid=%s)" })),
    h("p.muted.small", "%s is replaced by what the user types, escaped. Users are searched in every OU below the base DN."),
    field("Email attribute", h("input", { name: "emailAttribute", required: true, value: current?.emailAttribute ?? "mail" })),
    field("Name attribute", h("input", { name: "nameAttribute", value: current?.nameAttribute ?? "cn" })),
    h("button", { type: "button", onclick: action(async () => {
      await gql(`mutation($i: UpdateLdapCredentialInput!) { testLdapConnection(input: $i) }`, { i: values() });
      showNotice("The directory accepted the bind and the base DN can be read.");
    }) }, "Test connection"),
    " ",
    h("button.primary", { type: "submit" }, "Save LDAP settings"),
    current ? [" ", h("button.link.danger", { type: "button", onclick: action(async () => {
      await gql(`mutation { deleteLdapCredential }`);
      await ldapPage();
      showNotice("LDAP sign-in is turned off.");
    }) }, "Remove LDAP")] : null,
  );
  setMain(h("h1", "LDAP"), h("p.muted", "Directory users sign in with their LDAP user ID and password; their account is made on first sign-in from the entry's e-mail."), form);
}

const OAUTH_PROVIDERS = [
  ["GITHUB", "GitHub", "Base URL of GitHub Enterprise Server (empty: github.com)"],
  ["GOOGLE", "Google", null],
  ["GITLAB", "GitLab", "Base URL of a self-hosted GitLab (empty: gitlab.com)"],
  ["OIDC", "OpenID Connect", "Issuer URL (its discovery document is at /.well-known/openid-configuration)"],
];

async function oauthPage() {
  const query = OAUTH_PROVIDERS.map(([p]) => `${p}: oauthCredential(provider: ${p}) { clientId configUrl } ${p}_url: oauthCallbackUrl(provider: ${p})`).join(" ");
  const data = await gql(`{ ${query} }`);
  setMain(h("h1", "OAuth"), h("p.muted", "Users sign in with an account of these providers; the provider's verified e-mail must belong to an account here, be invited, or be of a self sign-up domain."),
    OAUTH_PROVIDERS.map(([provider, label, urlHelp]) => {
      const current = data[provider];
      const form = h("form.card", { "data-provider": provider, onsubmit: action(async () => {
        const v = formValues(form);
        await gql(`mutation($i: UpdateOAuthCredentialInput!) { updateOauthCredential(input: $i) }`, { i: {
          provider, clientId: v.clientId, clientSecret: v.clientSecret === "" ? null : v.clientSecret, configUrl: v.configUrl || null,
        } });
        await oauthPage();
        showNotice(`${label} sign-in saved.`);
      }) },
        h("h2", label),
        h("p.small", "Callback URL to register with the provider: ", h("code", data[`${provider}_url`])),
        field(`${label} client ID`, h("input", { name: "clientId", required: true, value: current?.clientId ?? "" })),
        field(`${label} client secret`, h("input", { name: "clientSecret", type: "password", autocomplete: "new-password", placeholder: current ? "unchanged (stored encrypted)" : "" })),
        urlHelp ? field(`${label} URL`, h("input", { name: "configUrl", type: "url", value: current?.configUrl ?? "", placeholder: urlHelp })) : null,
        h("button.primary", { type: "submit" }, `Save ${label}`),
        current ? [" ", h("button.link.danger", { type: "button", onclick: action(async () => {
          await gql(`mutation($p: OAuthProvider!) { deleteOauthCredential(provider: $p) }`, { p: provider });
          await oauthPage();
          showNotice(`${label} sign-in removed.`);
        }) }, `Remove ${label}`)] : null);
      return form;
    }));
}

// ---- admin: groups ----

async function groupsPage() {
  const data = await gql(`{
    userGroups { id name members { user { id email } isGroupAdmin } }
    users(first: 500) { edges { node { id email } } }
  }`);
  const users = data.users.edges.map((e) => e.node);
  const create = h("form.inline", { onsubmit: action(async () => {
    const { name } = formValues(create);
    await gql(`mutation($n: String!) { createUserGroup(input: {name: $n}) }`, { n: name });
    await groupsPage();
  }) }, field("New group", h("input", { name: "name", required: true, pattern: "[a-z][a-z0-9_\\-]*", title: "lowercase letters, digits, - and _" })), h("button.primary", { type: "submit" }, "Create group"));
  setMain(
    h("h1", "Groups"),
    h("section.card", create),
    data.userGroups.length ? null : h("p.muted", "No groups yet. Groups decide who may read private repositories."),
    data.userGroups.map((group) => {
      const add = h("form.inline", { onsubmit: action(async () => {
        const { user } = formValues(add);
        await gql(`mutation($g: ID!, $u: ID!) { upsertUserGroupMembership(input: {userGroupId: $g, userId: $u, isGroupAdmin: false}) }`, { g: group.id, u: user });
        await groupsPage();
      }) },
        field("Add member", h("select", { name: "user", required: true }, users.filter((u) => !group.members.some((m) => m.user.id === u.id)).map((u) => h("option", { value: u.id }, u.email)))),
        h("button", { type: "submit" }, "Add"));
      return h("section.card", { "data-group": group.name },
        h("h2", group.name),
        h("ul", group.members.map((m) => h("li", m.user.email, m.isGroupAdmin ? " (group admin) " : " ",
          h("button.link", { type: "button", onclick: action(async () => {
            await gql(`mutation($g: ID!, $u: ID!) { deleteUserGroupMembership(userGroupId: $g, userId: $u) }`, { g: group.id, u: m.user.id });
            await groupsPage();
          }) }, "Remove")))),
        add,
        h("button.link.danger", { type: "button", onclick: action(async () => {
          if (!confirm(`Delete the group ${group.name}?`)) return;
          await gql(`mutation($id: ID!) { deleteUserGroup(id: $id) }`, { id: group.id });
          await groupsPage();
        }) }, "Delete group"));
    }),
  );
}

// ---- admin: repositories and read access ----

const JOB_RUN_FIELDS = "id exitCode startedAt finishedAt progress { filesDone filesTotal mbPerSecond }";

function jobStatus(run, verb = "indexed") {
  if (!run) return h("span.muted", `not ${verb} yet`);
  if (run.exitCode == null) {
    if (!run.startedAt) return h("span.badge", "queued");
    const p = run.progress;
    return p
      ? h("span.badge", `indexing… ${p.filesDone.toLocaleString()} / ${p.filesTotal.toLocaleString()} files, ${p.mbPerSecond.toFixed(2)} MB/s`)
      : h("span.badge", "running…");
  }
  return run.exitCode === 0
    ? h("span.badge.ok", `${verb} ${when(run.finishedAt)}`)
    : h("span.badge.bad", `failed (${run.exitCode}) ${when(run.finishedAt)}`);
}

// Status cells of unfinished runs are refreshed in place every 2 s while their page is shown
// (the rest of the page, forms included, is left alone).
let runWatch = null;
function statusCell(run, cells, verb = "indexed") {
  const cell = h("td", { "data-verb": verb }, jobStatus(run, verb));
  if (run && run.exitCode == null) cells.set(run.id, cell);
  return cell;
}
function watchRuns(cells) {
  clearTimeout(runWatch);
  if (!cells.size) return;
  const path = location.pathname;
  runWatch = setTimeout(async () => {
    const shown = [...cells].filter(([, cell]) => document.body.contains(cell));
    if (location.pathname !== path || !shown.length) return;
    let runs;
    try {
      runs = (await gql(`query($ids: [ID!]) { jobRuns(ids: $ids, first: 100) { edges { node { ${JOB_RUN_FIELDS} } } } }`, { ids: shown.map(([id]) => id) })).jobRuns.edges;
    } catch {
      return;
    }
    const still = new Map();
    for (const { node } of runs) {
      const cell = cells.get(node.id);
      if (!cell) continue;
      cell.replaceChildren(jobStatus(node, cell.dataset.verb));
      if (node.exitCode == null) still.set(node.id, cell);
    }
    watchRuns(still);
  }, 2000);
}

async function repositoriesPage() {
  const data = await gql(`{
    repositoryList { id sourceId name kind gitUrl jobInfo { lastJobRun { ${JOB_RUN_FIELDS} } } }
    gitRepositories(first: 500) { edges { node { id sourceId name gitUrl } } }
    userGroups { id name }
  }`);
  const dbRepos = new Map(data.gitRepositories.edges.map((e) => [e.node.sourceId, e.node]));
  const add = h("form.inline", { onsubmit: action(async () => {
    const v = formValues(add);
    const groups = v.group ? [v.group] : null;
    await gql(`mutation($n: String!, $u: String!, $g: [ID!]) { createGitRepository(name: $n, gitUrl: $u, userGroupIds: $g) }`, { n: v.name, u: v.gitUrl, g: groups });
    await repositoriesPage();
    showNotice(`${v.name} was added and is being indexed.`);
  }) },
    field("Name", h("input", { name: "name", required: true })),
    field("Git URL", h("input", { name: "gitUrl", required: true, placeholder: "https://github.com/org/repo" })),
    data.userGroups.length ? field("Readable by", h("select", { name: "group" }, h("option", { value: "" }, "everyone"),
      data.userGroups.map((g) => h("option", { value: g.id }, g.name)))) : null,
    h("button.primary", { type: "submit" }, "Add repository"));
  const cells = new Map();
  const rows = await Promise.all(data.repositoryList.map(async (repo) => {
    const policy = (await gql(`query($s: String!) { sourceIdAccessPolicies(sourceId: $s) { read { id name } } }`, { s: repo.sourceId })).sourceIdAccessPolicies;
    const granted = policy.read;
    const grant = h("select", { "aria-label": `Grant ${repo.name} to a group` }, h("option", { value: "" }, "Grant read to…"),
      data.userGroups.filter((g) => !granted.some((r) => r.id === g.id)).map((g) => h("option", { value: g.id }, g.name)));
    grant.addEventListener("change", action(async () => {
      if (!grant.value) return;
      await gql(`mutation($s: String!, $g: ID!) { grantSourceIdReadAccess(sourceId: $s, userGroupId: $g) }`, { s: repo.sourceId, g: grant.value });
      await repositoriesPage();
    }));
    const db = dbRepos.get(repo.sourceId);
    return h("tr", { "data-repository": repo.name },
      h("td", h("strong", repo.name), h("br"), h("small.muted", repo.gitUrl)),
      h("td", repo.kind === "GIT_CONFIG" ? "config.toml" : repo.kind === "GIT" ? "added here" : "integration"),
      statusCell(repo.jobInfo.lastJobRun, cells),
      h("td", granted.length ? granted.map((g) => h("span.tag", g.name, " ", h("button.link", { type: "button", "aria-label": `Revoke ${g.name}`, onclick: action(async () => {
        const last = granted.length === 1;
        if (last && !confirm(`${g.name} is the only group that may read ${repo.name}. Revoke it and make ${repo.name} readable by everyone?`)) return;
        await gql(`mutation($s: String!, $g: ID!, $p: Boolean) { revokeSourceIdReadAccess(sourceId: $s, userGroupId: $g, makePublic: $p) }`, { s: repo.sourceId, g: g.id, p: last });
        await repositoriesPage();
      }) }, "×"))) : h("span.muted", "everyone"), " ", data.userGroups.length ? grant : null),
      h("td", db ? h("button.link.danger", { type: "button", onclick: action(async () => {
        if (!confirm(`Remove ${repo.name}?`)) return;
        await gql(`mutation($id: ID!) { deleteGitRepository(id: $id) }`, { id: db.id });
        await repositoriesPage();
      }) }, "Remove") : ""));
  }));
  setMain(
    h("h1", "Repositories"),
    h("section.card", add),
    h("table", h("thead", h("tr", h("th", "Repository"), h("th", "From"), h("th", "Index"), h("th", "Read access"), h("th", ""))), h("tbody", rows)),
    h("p.muted", "A repository without groups can be read by everyone; with groups, only by their members (and admins)."),
  );
  watchRuns(cells);
}

// ---- admin: documents ----

async function documentsPage() {
  const data = await gql(`{ customWebDocuments(first: 200) { edges { node { id name url sourceId jobInfo { lastJobRun { ${JOB_RUN_FIELDS} } } } } } }`);
  const cells = new Map();
  const add = h("form.inline", { onsubmit: action(async () => {
    const v = formValues(add);
    await gql(`mutation($n: String!, $u: String!) { createCustomDocument(input: {name: $n, url: $u}) }`, { n: v.name, u: v.url });
    await documentsPage();
    showNotice(`${v.name} is being crawled.`);
  }) }, field("Name", h("input", { name: "name", required: true })), field("URL", h("input", { name: "url", type: "url", required: true })), h("button.primary", { type: "submit" }, "Add site"));
  setMain(
    h("h1", "Documents"),
    h("p.muted", "Web sites crawled into the doc corpus (re-crawled daily). Ask questions with them under Docs."),
    h("section.card", add),
    h("table", h("thead", h("tr", h("th", "Name"), h("th", "URL"), h("th", "Crawl"), h("th", ""))),
      h("tbody", data.customWebDocuments.edges.map(({ node }) => h("tr", h("td", node.name), h("td", h("a", { href: node.url, rel: "noopener noreferrer", target: "_blank" }, node.url)),
        statusCell(node.jobInfo.lastJobRun, cells, "crawled"),
        h("td", h("button.link.danger", { type: "button", onclick: action(async () => {
          await gql(`mutation($id: ID!) { deleteCustomDocument(id: $id) }`, { id: node.id });
          await documentsPage();
        }) }, "Remove")))))),
  );
  watchRuns(cells);
}

// ---- admin: jobs ----

async function jobsPage() {
  const data = await gql(`{ jobRuns(last: 100) { edges { node { job createdAt ${JOB_RUN_FIELDS} } } } jobRunStats { success failed pending } }`);
  const cells = new Map();
  const log = h("pre.log", { tabindex: 0, "aria-label": "Job log" });
  const runs = data.jobRuns.edges.map((e) => e.node).reverse();
  setMain(
    h("h1", "Jobs"),
    h("p", `Last 7 days: ${data.jobRunStats.success} succeeded, ${data.jobRunStats.failed} failed, ${data.jobRunStats.pending} pending.`),
    h("table", h("thead", h("tr", h("th", "Job"), h("th", "Created"), h("th", "Finished"), h("th", "Result"), h("th", ""))),
      h("tbody", runs.map((run) => h("tr",
        h("td", run.job), h("td", when(run.createdAt)), h("td", when(run.finishedAt)),
        statusCell(run, cells, "finished"),
        h("td", h("button.link", { type: "button", onclick: action(async () => {
          const response = await fetch(`/background-jobs/${run.id}/logs`, { headers: { authorization: `Bearer ${session.access}` } });
          log.textContent = response.ok ? await response.text() : `No log (${response.status}).`;
          log.focus();
        }) }, "Log")))))),
    log,
  );
  watchRuns(cells);
}

// ---- usage ----

async function usagePage() {
  const data = await gql(`{ dailyStatsInPastYear { start completions selects views } }`);
  const byDay = new Map();
  for (const row of data.dailyStatsInPastYear) {
    const day = row.start.slice(0, 10);
    const entry = byDay.get(day) ?? { completions: 0, selects: 0, views: 0 };
    entry.completions += row.completions;
    entry.selects += row.selects;
    entry.views += row.views;
    byDay.set(day, entry);
  }
  const days = [...byDay.entries()].sort((a, b) => b[0].localeCompare(a[0])).slice(0, 30);
  const total = [...byDay.values()].reduce((t, d) => ({ c: t.c + d.completions, s: t.s + d.selects }), { c: 0, s: 0 });
  const max = Math.max(1, ...days.map(([, d]) => d.completions));
  setMain(
    h("h1", "Usage"),
    h("p", `Past year${me.isAdmin ? " (everyone)" : " (you)"}: ${total.c} completions, ${total.s} accepted${total.c ? ` (${Math.round((100 * total.s) / total.c)}%)` : ""}.`),
    days.length
      ? h("table.usage", h("thead", h("tr", h("th", "Day"), h("th", "Completions"), h("th", "Accepted"), h("th", ""))),
          h("tbody", days.map(([day, d]) => h("tr", h("td", day), h("td", d.completions), h("td", d.selects),
            h("td", h("div.bar", { style: `width:${(100 * d.completions) / max}%`, "aria-hidden": "true" }))))))
      : h("p.muted", "No completions yet."),
  );
}

render();
