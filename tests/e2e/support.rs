//! Starting the real `tabby` binary for a test: a fresh `TABBY_ROOT` with the given config,
//! `--port 0` (the server prints the address it bound), and a client for it.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

pub use fake_model_servers::{FakeServer, Protocol, Script};
use serde_json::Value;

pub struct TabbyServer {
    child: Option<Child>,
    url: String,
    pub root: tempfile::TempDir,
    stderr_path: PathBuf,
    extra: Vec<String>,
    starts: usize,
    /// The PostgreSQL database the server's config names (see [`test_database`]); `None`:
    /// the SQLite file `$TABBY_ROOT/ee/db.sqlite`.
    database_url: Option<String>,
}

/// The environment variable that runs the enterprise tests on PostgreSQL: a server URL
/// (`postgres://user@127.0.0.1:PORT/postgres`, `scripts/test.sh` starts one). Each server a
/// test starts then gets a fresh database there, named in its config's `[database] url`.
pub const TEST_POSTGRES_URL_VAR: &str = "TABBY_TEST_POSTGRES_URL";

/// A fresh database on the test PostgreSQL server, if [`TEST_POSTGRES_URL_VAR`] names one.
pub fn test_database() -> Option<String> {
    let server = std::env::var(TEST_POSTGRES_URL_VAR).ok()?;
    let name = format!(
        "tabby_e2e_{}_{}",
        std::process::id(),
        NEXT_DATABASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let out = Command::new("psql")
        .args([server.as_str(), "-v", "ON_ERROR_STOP=1", "-qc"])
        .arg(format!("CREATE DATABASE {name}"))
        .output()
        .expect("psql");
    assert!(out.status.success(), "CREATE DATABASE {name}: {out:?}");
    let (base, _) = server
        .rsplit_once('/')
        .expect("TABBY_TEST_POSTGRES_URL ends with /DATABASE");
    Some(format!("{base}/{name}"))
}

static NEXT_DATABASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Spawns `tabby serve` on `root` and waits for the address it prints.
fn spawn_serve(
    root: &Path,
    stderr_path: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Child, String) {
    let stderr = std::fs::File::create(stderr_path).expect("stderr log");
    let mut child = Command::new(tabby_bin())
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(extra)
        .env("TABBY_ROOT", root)
        .env("RUST_LOG", "tabby=debug,warn")
        // Hermetic: the JWT secret comes from `env` or the database, never from the caller's
        // environment.
        .env_remove("TABBY_WEBSERVER_JWT_TOKEN_SECRET")
        // The database is the one the test's config names.
        .env_remove("TABBY_DATABASE_URL")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn tabby");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("Listening at ") {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => (child, url),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tabby did not start; stderr:\n{}",
                std::fs::read_to_string(stderr_path).unwrap_or_default()
            );
        }
    }
}

pub fn tabby_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tabby")
}

impl TabbyServer {
    /// Starts `tabby serve --no-webserver` with `config` as `$TABBY_ROOT/config.toml`.
    pub fn start(config: &str) -> TabbyServer {
        Self::start_with_args(config, &["--no-webserver"])
    }

    /// Starts `tabby serve` WITH the enterprise layer (SQLite at `$TABBY_ROOT/ee/db.sqlite`,
    /// GraphQL, tokens required on `/v1*`), with `env` added to its environment.
    pub fn start_ee(config: &str, env: &[(&str, &str)]) -> TabbyServer {
        Self::start_with_env(config, &[], env)
    }

    pub fn start_with_args(config: &str, extra: &[&str]) -> TabbyServer {
        Self::start_with_env(config, extra, &[])
    }

    pub fn start_with_env(config: &str, extra: &[&str], env: &[(&str, &str)]) -> TabbyServer {
        let database_url = test_database();
        let config = match &database_url {
            Some(url) => format!("{config}\n[database]\nurl = {url:?}\n"),
            None => config.to_string(),
        };
        Self::start_on(&config, extra, env, database_url)
    }

    /// Starts `tabby serve EXTRA` on a root of its own whose config (`config`, as given) names
    /// the PostgreSQL database `database_url`: a replica on another machine.
    pub fn start_on_database(config: &str, extra: &[&str], database_url: &str) -> TabbyServer {
        Self::start_on(config, extra, &[], Some(database_url.to_owned()))
    }

    /// Starts `tabby serve` with the enterprise layer on the SQLite file, whatever
    /// [`TEST_POSTGRES_URL_VAR`] says.
    pub fn start_sqlite_ee(config: &str) -> TabbyServer {
        Self::start_on(config, &[], &[], None)
    }

    fn start_on(
        config: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        database_url: Option<String>,
    ) -> TabbyServer {
        let root = tempfile::tempdir().expect("temp dir");
        std::fs::write(root.path().join("config.toml"), config).expect("write config");
        let stderr_path = root.path().join("stderr.log");
        let (child, url) = spawn_serve(root.path(), &stderr_path, extra, env);
        TabbyServer {
            child: Some(child),
            url,
            root,
            stderr_path,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            starts: 1,
            database_url,
        }
    }

    /// Points the config at the PostgreSQL database `url` (`[database] url`, the whole config
    /// replaced); takes effect at the next [`TabbyServer::restart`].
    pub fn move_to_database(&mut self, url: &str) {
        std::fs::write(
            self.root.path().join("config.toml"),
            format!("[database]\nurl = {url:?}\n"),
        )
        .expect("write config");
        self.database_url = Some(url.to_owned());
    }

    /// Runs `sql` on the server's database (to age rows, or read what is stored) and returns
    /// what it printed: with the `sqlite3` CLI, or `psql` when the server is on PostgreSQL.
    /// The SQL must read the same on both (`DATETIME('now', '-1 day')` does).
    pub fn sql(&self, sql: &str) -> String {
        let out = match &self.database_url {
            Some(url) => Command::new("psql")
                .args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-qAtc", sql])
                .output()
                .expect("psql"),
            None => Command::new("sqlite3")
                .arg(self.root.path().join("ee/db.sqlite"))
                .arg(format!("PRAGMA busy_timeout = 5000; {sql}"))
                .output()
                .expect("sqlite3"),
        };
        assert!(out.status.success(), "{sql}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Everything the server's database holds, as text: every file under `$TABBY_ROOT/ee`, or
    /// `pg_dump`'s dump of its PostgreSQL database.
    pub fn database_bytes(&self) -> Vec<Vec<u8>> {
        match &self.database_url {
            Some(url) => {
                let out = Command::new("pg_dump")
                    .args(["--data-only", url.as_str()])
                    .output()
                    .expect("pg_dump");
                assert!(out.status.success(), "{out:?}");
                vec![out.stdout]
            }
            None => std::fs::read_dir(self.root.path().join("ee"))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.is_file())
                .map(|path| std::fs::read(path).unwrap())
                .collect(),
        }
    }

    /// Stops the server (SIGTERM, clean exit) and starts a new one on the same `TABBY_ROOT`
    /// with the same arguments and `env`; its stderr goes to a new log file.
    pub fn restart(&mut self, env: &[(&str, &str)]) {
        if self.child.is_some() {
            let status = self.terminate();
            assert!(
                status.success(),
                "exit status {status:?}; stderr:\n{}",
                self.stderr()
            );
        }
        self.starts += 1;
        self.stderr_path = self.root.path().join(format!("stderr-{}.log", self.starts));
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let (child, url) = spawn_serve(self.root.path(), &self.stderr_path, &extra, env);
        self.child = Some(child);
        self.url = url;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The running server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server stopped").id()
    }

    /// Peak resident memory of the server so far, in KiB (`VmHWM` of `/proc/<pid>/status`).
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Kills the server with SIGKILL (no shutdown of any kind) and waits until it is gone;
    /// `restart` then starts a new one on the same `TABBY_ROOT`.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("server already stopped");
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server already stopped");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("tabby did not exit within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Another `tabby serve` on a server's `TABBY_ROOT` (a replica of another role); killed when
/// dropped.
pub struct Replica {
    child: Child,
    url: String,
    stderr_path: PathBuf,
}

impl TabbyServer {
    /// Starts `tabby serve EXTRA` on this server's `TABBY_ROOT`, config and database.
    pub fn replica(&self, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Replica {
        let stderr_path = self.root.path().join(format!("stderr-{name}.log"));
        let (child, url) = spawn_serve(self.root.path(), &stderr_path, extra, env);
        Replica {
            child,
            url,
            stderr_path,
        }
    }
}

impl Replica {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TabbyServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `tabby` with `args` and `TABBY_ROOT` = `root`; returns (status, stdout, stderr).
pub fn run_tabby(root: &Path, args: &[&str]) -> (ExitStatus, String, String) {
    let out = Command::new(tabby_bin())
        .args(args)
        .env("TABBY_ROOT", root)
        .output()
        .expect("run tabby");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// POSTs JSON and returns (status, body as JSON or Null).
pub async fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let response = client().post(url).json(body).send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub async fn get_json(url: &str) -> (u16, Value) {
    let response = client().get(url).send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `[model.completion.http]` for a llama.cpp fake with a CodeLlama-style template.
pub fn llama_completion_config(endpoint: &str) -> String {
    format!(
        r#"
[model.completion.http]
kind = "llama.cpp/completion"
api_endpoint = "{endpoint}"
prompt_template = "<PRE> {{prefix}} <SUF>{{suffix}} <MID>"
"#
    )
}

/// `[model.chat.http]` for an OpenAI-style fake chat model named `model_name`.
pub fn openai_chat_config(endpoint: &str, model_name: &str) -> String {
    format!(
        "[model.chat.http]\nkind = \"openai/chat\"\napi_endpoint = \"{endpoint}/v1\"\nmodel_name = \"{model_name}\"\n\n"
    )
}

/// `[model.embedding.http]` for an OpenAI-style fake embedding model named `model_name`.
pub fn openai_embedding_config(endpoint: &str, model_name: &str) -> String {
    format!(
        "[model.embedding.http]\nkind = \"openai/embedding\"\napi_endpoint = \"{endpoint}/v1\"\nmodel_name = \"{model_name}\"\n\n"
    )
}

/// `[<section>.code_search_params]` with every threshold off, 20 hits from 40 per leg
/// (`section` is `completion` or `answer`).
pub fn open_search_params(section: &str) -> String {
    format!(
        "[{section}.code_search_params]\nmin_embedding_score = -1.0\nmin_bm25_score = -1.0\nmin_rrf_score = -1.0\nnum_to_return = 20\nnum_to_score = 40\n\n"
    )
}

/// The events logged so far, as JSON values (all files under `events/`).
pub fn read_events(root: &Path) -> Vec<Value> {
    let mut events = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join("events")) else {
        return events;
    };
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            events.push(serde_json::from_str(line).expect("event line is JSON"));
        }
    }
    events
}

/// Runs `git -C dir args…` with a fixed author; returns trimmed stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Ann")
        .env("GIT_AUTHOR_EMAIL", "ann@example.invalid")
        .env("GIT_COMMITTER_NAME", "Ann")
        .env("GIT_COMMITTER_EMAIL", "ann@example.invalid")
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A git repository `root/name` with one commit of `files` on `main`.
pub fn make_repo(root: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let repo = root.join(name);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for (path, text) in files {
        let file = repo.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", name]);
    repo
}

/// A directory of the repository's `tests/` (npm packages pinned by a lockfile).
pub fn tests_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests")
        .join(name)
}

/// The interpreter of `tests/<name>/.venv`, with `tests/<name>/requirements.txt` installed
/// (scripts/test.sh makes it; made here when missing, in a directory of its own that is then
/// renamed, so parallel tests never share a half-made one).
pub fn venv_python(name: &str) -> PathBuf {
    let dir = tests_dir(name);
    let python = dir.join(".venv/bin/python");
    if python.exists() {
        return python;
    }
    let partial = dir.join(format!(".venv.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    let run = |cmd: &mut Command| {
        let out = cmd
            .output()
            .expect("this test needs python3 with venv and pip");
        assert!(out.status.success(), "{cmd:?}: {out:?}");
    };
    run(Command::new("python3").arg("-m").arg("venv").arg(&partial));
    run(Command::new(partial.join("bin/python"))
        .args(["-m", "pip", "install", "-q", "-r"])
        .arg(dir.join("requirements.txt")));
    if std::fs::rename(&partial, dir.join(".venv")).is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    python
}

/// `npm ci` in `dir` unless `installed` (a path inside `dir`) already exists.
pub fn npm_ci(dir: &Path, installed: &str) {
    if dir.join(installed).exists() {
        return;
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("this test needs Node.js 20 and npm on PATH: {e}"));
    assert!(
        out.status.success(),
        "`npm ci` in {} failed ({}):\n{}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where `tabby download` put the embedded default models (scripts/test.sh runs it first):
/// `$TABBY_TEST_MODELS_DIR`, else `~/.tabby/models`. Panics naming `tabby download` when the
/// default completion/chat model is missing.
pub fn embedded_models_dir() -> PathBuf {
    let dir = std::env::var_os("TABBY_TEST_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".tabby/models"));
    assert!(
        dir.join("TabbyML/Qwen2.5-Coder-0.5B-Instruct/model.gguf")
            .is_file(),
        "the default models are missing from {}: run `tabby download` (scripts/test.sh does)",
        dir.display()
    );
    dir
}
