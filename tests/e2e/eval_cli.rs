//! `tabby eval` from the command line: a small labelled corpus is indexed into a temporary
//! index, every query runs through each leg, results are written in the eval set's format, and
//! the per-kind table and the ceilings are printed; bad input stops it with a message.

use std::{
    path::{Path, PathBuf},
    process::ExitStatus,
};

use serde_json::{Value, json};

use crate::support::*;

const CONFIG: &str = "import json\n\n\ndef parse_config_file(path):\n    with open(path) as handle:\n        return json.load(handle)\n\n\ndef merge_config_layers(base, override):\n    merged = dict(base)\n    merged.update(override)\n    return merged\n";
const RENDER: &str = "def render_html_table(rows):\n    cells = ['<td>' + str(cell) + '</td>' for row in rows for cell in row]\n    return '<table>' + ''.join(cells) + '</table>'\n\n\ndef escape_html_text(text):\n    return text.replace('&', '&amp;').replace('<', '&lt;')\n";
const CHECKSUM: &str = "import hashlib\n\n\ndef compute_file_checksum(path):\n    digest = hashlib.sha256()\n    with open(path, 'rb') as handle:\n        digest.update(handle.read())\n    return digest.hexdigest()\n";
const APP: &str = "from config import parse_config_file\nfrom render import render_html_table\n\n\ndef main(path):\n    settings = load_settings(path)\n    rows = settings['rows']\n    page = ";

fn write_corpus(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in [
        ("config.py", CONFIG),
        ("render.py", RENDER),
        ("checksum.py", CHECKSUM),
        ("app.py", APP),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn query_lines() -> Vec<Value> {
    vec![
        json!({"id": "nl-config", "set": "tiny", "kind": "nl", "language": "python",
               "query": "Parse the config file at a path", "filepath": null,
               "relevant": [{"filepath": "config.py", "start_line": 4, "end_line": 6}]}),
        json!({"id": "nl-checksum", "set": "tiny", "kind": "nl", "language": "python",
               "query": "Compute the sha256 checksum of a file", "filepath": null,
               "relevant": [{"filepath": "checksum.py", "start_line": 4, "end_line": 8}]}),
        json!({"id": "cc-render", "set": "tiny", "kind": "completion", "language": "python",
               "query": APP, "filepath": "app.py",
               "relevant": [{"filepath": "render.py", "start_line": 1, "end_line": 3}]}),
    ]
}

fn write_queries(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

fn read_results(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A temporary root with the corpus and the queries written.
struct Fixture {
    root: tempfile::TempDir,
    corpus: std::path::PathBuf,
    queries: std::path::PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let corpus = root.path().join("corpus");
        write_corpus(&corpus);
        let queries = root.path().join("queries.jsonl");
        write_queries(&queries, &query_lines());
        Fixture {
            root,
            corpus,
            queries,
        }
    }

    /// Runs `tabby eval` on `queries` and the corpus with the hash embedding, plus `extra`.
    fn eval(&self, queries: &Path, extra: &[&str]) -> (std::process::ExitStatus, String, String) {
        let mut args = vec![
            "eval",
            "--queries",
            queries.to_str().unwrap(),
            "--corpus",
            self.corpus.to_str().unwrap(),
            "--embedding",
            "hash",
        ];
        args.extend_from_slice(extra);
        run_tabby(self.root.path(), &args)
    }
}

/// The numbers after the two label cells of the printed table row that starts with `prefix`
/// (`| bm25 | nl |` → n, R@1, R@5, R@10, MRR@10, nDCG@10; `| nl | 2 |` → the ceilings).
fn table_row(stdout: &str, prefix: &str) -> Vec<f64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no row {prefix} in:\n{stdout}"));
    line.trim_matches('|')
        .split('|')
        .skip(2)
        .map(|c| c.trim().parse().unwrap())
        .collect()
}

#[test]
fn eval_scores_every_leg_writes_results_and_prints_ceilings() {
    let f = Fixture::new();
    let out = f.root.path().join("results.jsonl");
    let (status, stdout, stderr) = f.eval(
        &f.queries,
        &["--num-to-score", "5", "--out", out.to_str().unwrap()],
    );
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");

    // The lexical leg finds both definitions by their words, first.
    let bm25_nl = table_row(&stdout, "| bm25 | nl |");
    assert_eq!(bm25_nl[0], 2.0, "n");
    assert_eq!(bm25_nl[1], 1.0, "R@1 of bm25 on nl:\n{stdout}");
    assert_eq!(table_row(&stdout, "| rrf | all |")[0], 3.0);
    assert_eq!(table_row(&stdout, "| embedding | completion |")[0], 1.0);
    assert!(
        stdout.contains("ceilings (recall over each leg's 5 candidates"),
        "{stdout}"
    );
    let ceiling = table_row(&stdout, "| nl | 2 |");
    assert_eq!(
        ceiling[0], 1.0,
        "bm25 candidates hold every nl target:\n{stdout}"
    );
    assert!(
        ceiling[2] >= ceiling[0] && ceiling[2] >= ceiling[1],
        "{ceiling:?}"
    );
    assert!(stdout.contains("query latency"), "{stdout}");

    // One results file per leg, one line per query, in the scorer's format.
    for leg in ["bm25", "embedding", "rrf"] {
        let rows = read_results(&f.root.path().join(format!("results.{leg}.jsonl")));
        let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["nl-config", "nl-checksum", "cc-render"], "{leg}");
        for row in &rows {
            let results = row["results"].as_array().unwrap();
            assert!(results.len() <= 5, "{leg}: {row}");
            for r in results {
                assert!(r["start_line"].as_u64().unwrap() <= r["end_line"].as_u64().unwrap());
            }
            // A completion query never gets its own file back.
            if row["id"] == "cc-render" {
                assert!(results.iter().all(|r| r["filepath"] != "app.py"), "{row}");
            }
        }
        if leg == "bm25" {
            assert_eq!(rows[0]["results"][0]["filepath"], "config.py");
            assert_eq!(rows[1]["results"][0]["filepath"], "checksum.py");
        }
    }
    // What completion retrieval returns: app.py imports render.py and config.py, and the
    // import candidates come first.
    let rows = read_results(&f.root.path().join("results.imports+rrf.jsonl"));
    let cc = rows.iter().find(|r| r["id"] == "cc-render").unwrap();
    let first_two: Vec<&str> = cc["results"]
        .as_array()
        .unwrap()
        .iter()
        .take(2)
        .map(|r| r["filepath"].as_str().unwrap())
        .collect();
    assert!(first_two.contains(&"render.py"), "{cc}");
    assert!(
        first_two
            .iter()
            .all(|p| ["render.py", "config.py"].contains(p)),
        "{cc}"
    );
    assert_eq!(table_row(&stdout, "| imports+rrf | completion |")[0], 1.0);
}

/// The line spans of every result in these rows of an eval results file.
fn result_spans<'a>(rows: impl IntoIterator<Item = &'a Value>) -> Vec<u64> {
    rows.into_iter()
        .flat_map(|row| row["results"].as_array().unwrap().clone())
        .map(|r| r["end_line"].as_u64().unwrap() - r["start_line"].as_u64().unwrap() + 1)
        .collect()
}

/// `--chunk-size` indexes with smaller chunks, and the result-lines table counts the lines
/// the results file holds.
#[test]
fn eval_indexes_with_another_chunk_size_and_counts_result_lines() {
    let f = Fixture::new();
    let run = |name: &str, extra: &[&str]| {
        let out = f.root.path().join(name);
        let mut args = vec!["--legs", "bm25", "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (status, stdout, stderr) = f.eval(&f.queries, &args);
        assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
        (stdout, out)
    };
    let (default_stdout, default_out) = run("default.jsonl", &[]);
    let (small_stdout, small_out) = run("small.jsonl", &["--chunk-size", "64"]);

    // Each file of the fixture fits one chunk of 512 characters; at 64 a chunk holds a line
    // or two of this code.
    let default_spans = result_spans(&read_results(&default_out));
    let small_spans = result_spans(&read_results(&small_out));
    assert!(default_spans.iter().any(|&s| s >= 7), "{default_spans:?}");
    assert!(small_spans.iter().all(|&s| s <= 4), "{small_spans:?}");
    assert!(small_spans.len() > default_spans.len());

    // The table's mean lines per query are the results file's, and every result of this
    // small corpus fits the line budget, so recall within it is Recall@10 (the budget's cut
    // is unit-tested in eval/mod.rs).
    for (stdout, out) in [(&default_stdout, &default_out), (&small_stdout, &small_out)] {
        let rows = read_results(out);
        let sizes = stdout
            .split("result lines")
            .nth(1)
            .unwrap_or_else(|| panic!("no result-lines table:\n{stdout}"));
        let size_row = table_row(sizes, "| bm25 | nl |");
        let nl_lines: u64 = result_spans(
            rows.iter()
                .filter(|r| r["id"].as_str().unwrap().starts_with("nl-")),
        )
        .iter()
        .sum();
        assert_eq!(size_row[0], 2.0, "{stdout}");
        assert!(
            (size_row[1] - nl_lines as f64 / 2.0).abs() <= 0.5,
            "{nl_lines} lines over 2 queries:\n{stdout}"
        );
        assert_eq!(
            size_row[2],
            table_row(stdout, "| bm25 | nl |")[3],
            "{stdout}"
        );
    }
}

#[test]
fn eval_rejects_bad_input_with_a_message() {
    let f = Fixture::new();
    let run = |extra: &[&str], queries: &Path| f.eval(queries, extra);
    let queries = f.queries.clone();
    let root = f.root.path();

    let (status, _, stderr) = run(&["--legs", "bm25,dense"], &queries);
    assert!(!status.success());
    assert!(stderr.contains("unknown leg \"dense\""), "{stderr}");

    let (status, _, stderr) = run(&["--num-to-score", "0"], &queries);
    assert!(!status.success());
    assert!(
        stderr.contains("--num-to-score must be at least 1"),
        "{stderr}"
    );

    for size in ["0", "10", "1000000"] {
        let (status, _, stderr) = run(&["--chunk-size", size], &queries);
        assert!(!status.success());
        assert!(
            stderr.contains(&format!(
                "--chunk-size must be between 64 and 16384 characters, not {size}"
            )),
            "{stderr}"
        );
    }

    let broken = root.join("broken.jsonl");
    std::fs::write(
        &broken,
        format!("{}\n{{\"id\": \"x\", \"kind\": 3}}\n", query_lines()[0]),
    )
    .unwrap();
    let (status, _, stderr) = run(&[], &broken);
    assert!(!status.success());
    assert!(
        stderr.contains("broken.jsonl:2: not a query"),
        "names the file and line: {stderr}"
    );

    let (status, _, stderr) = run(&[], &root.join("missing.jsonl"));
    assert!(!status.success());
    assert!(stderr.contains("cannot read"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The fixture's completion query, its call line written into `app.py`: `render_html_table`
/// called from `app.py`, defined in `render.py`.
fn completion_query(f: &Fixture) -> Value {
    std::fs::write(
        f.corpus.join("app.py"),
        format!("{APP}render_html_table(rows)\n    return page\n"),
    )
    .unwrap();
    let mut cc = query_lines()[2].clone();
    cc["symbol"] = json!("render_html_table");
    cc["call_line"] = json!(APP.lines().count());
    cc
}

/// `tabby eval --mode completion` on the fixture with the embedded default models.
fn eval_completion(
    f: &Fixture,
    queries: &Path,
    extra: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let mut args = vec![
        "eval",
        "--mode",
        "completion",
        "--queries",
        queries.to_str().unwrap(),
        "--corpus",
        f.corpus.to_str().unwrap(),
        "--embedding",
        "hash",
    ];
    args.extend_from_slice(extra);
    let output = std::process::Command::new(tabby_bin())
        .args(&args)
        .env("TABBY_ROOT", f.root.path())
        .env("TABBY_MODEL_CACHE_ROOT", embedded_models_dir())
        .output()
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

/// A completion-eval table row's numbers: n, identifier match, exact line, edit sim, with
/// snippet, target snippet, callee named, prompt bytes.
fn completion_row(stdout: &str, variant: &str) -> Vec<f64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("| {variant} |")))
        .unwrap_or_else(|| panic!("no row {variant} in:\n{stdout}"));
    line.trim_matches('|')
        .split('|')
        .skip(1)
        .take(8)
        .map(|c| c.trim().parse().unwrap())
        .collect()
}

/// `--mode completion` on the embedded default completion model: the completion query runs
/// with retrieval off and on, the editor's suffix is rebuilt from the corpus, and the table
/// has a row per variant; with retrieval on, the prompt holds the callee's definition and the
/// model writes its name.
#[test]
fn eval_completion_mode_runs_the_model_per_variant() {
    let f = Fixture::new();
    let cc = completion_query(&f);
    let queries = f.root.path().join("completion.jsonl");
    write_queries(&queries, &[query_lines()[0].clone(), cc]);
    let out = f.root.path().join("completions.jsonl");
    let (status, stdout, stderr) = eval_completion(
        &f,
        &queries,
        &["--variants", "off,on", "--out", out.to_str().unwrap()],
    );
    assert!(status.success(), "{stdout}\n{stderr}");
    let row = |variant: &str| completion_row(&stdout, variant);
    let (off, on) = (row("off"), row("on"));
    assert_eq!(off[0], 1.0, "only the completion query runs: {stdout}");
    assert_eq!((off[4], off[5]), (0.0, 0.0), "{stdout}");
    assert_eq!((on[4], on[5]), (1.0, 1.0), "{stdout}");
    assert_eq!(
        on[1], 1.0,
        "the model calls the retrieved function: {stdout}"
    );
    let rows = read_results(&out);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["expected_line"], "render_html_table(rows)");
    assert_eq!(rows[1]["snippets"][0], "render.py");

    // Bad input: an unknown variant part, and a completion query without call_line.
    let (status, _, stderr) = f.eval(&queries, &["--mode", "completion", "--variants", "on,fast"]);
    assert!(!status.success());
    assert!(stderr.contains("unknown variant part \"fast\""), "{stderr}");
    let (status, _, stderr) = f.eval(&f.queries, &["--mode", "completion"]);
    assert!(!status.success());
    assert!(stderr.contains("not a completion query"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// After `module.` (a module of the corpus that names all it offers), the completion service
/// tells the embedded model the module's names, and the model's answer starts with one of
/// them; the `free` variant turns that off. The table's last column and `--out` say so.
#[test]
fn eval_completion_mode_constrains_the_name_after_a_module() {
    let f = Fixture::new();
    let page = "import render\n\n\ndef page(rows):\n    html = render.";
    std::fs::write(
        f.corpus.join("page.py"),
        format!("{page}render_html_table(rows)\n    return html\n"),
    )
    .unwrap();
    let cc = json!({"id": "cc-module", "set": "tiny", "kind": "completion", "language": "python",
                    "query": page, "filepath": "page.py", "symbol": "render_html_table",
                    "call_line": page.lines().count(),
                    "relevant": [{"filepath": "render.py", "start_line": 1, "end_line": 3}]});
    let queries = f.root.path().join("module.jsonl");
    write_queries(&queries, &[cc]);
    let out = f.root.path().join("module-out.jsonl");
    let (status, stdout, stderr) = eval_completion(
        &f,
        &queries,
        &["--variants", "on,on+free", "--out", out.to_str().unwrap()],
    );
    assert!(status.success(), "{stdout}\n{stderr}");
    let last_cell = |variant: &str| {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {variant} |")))
            .unwrap_or_else(|| panic!("no row {variant} in:\n{stdout}"));
        line.trim_end()
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(last_cell("on"), "1.000 (1/1)", "{stdout}");
    assert_eq!(last_cell("on+free"), "0.000 (0/0)", "{stdout}");
    let rows = read_results(&out);
    // render.py's two functions and the module's own names (`__name__`, …).
    assert!(rows[0]["first_names"].as_u64().unwrap() >= 2, "{}", rows[0]);
    assert_eq!(rows[0]["callee_allowed"], true);
    assert_eq!(rows[1]["first_names"], Value::Null);
    let text = rows[0]["text"].as_str().unwrap();
    assert!(
        ["render_html_table", "escape_html_text"]
            .iter()
            .any(|n| text.starts_with(&format!("{n}("))),
        "{text:?}"
    );
}

/// After `module.`, the name the file itself wrote after the same access elsewhere (its
/// indexed copy, below the editor's window) leads the embedded model's choice: `on` (the
/// default weight) writes it, `on+cache0` (the model alone) does not.
#[test]
fn eval_completion_mode_follows_the_file_s_habit_after_a_module() {
    let f = Fixture::new();
    std::fs::write(
        f.corpus.join("texts.py"),
        "def wrap(text):\n    return '<p>' + text + '</p>'\n\n\ndef shout(text):\n    return text.upper() + '!'\n\n\ndef whisper(text):\n    return text.lower() + '...'\n",
    )
    .unwrap();
    let page = "import texts\n\n\ndef page(rows):\n    html = texts.wrap(texts.";
    // The editor's window is the prefix and the 20 lines after the call's; the file's other
    // uses of the pair come after it.
    let filler: String = (0..10)
        .map(|i| format!("\n\ndef filler_{i:02}():\n    return {i}"))
        .collect();
    std::fs::write(
        f.corpus.join("page.py"),
        format!(
            "{page}whisper(rows))\n    return html{filler}\n\n\ndef later(rows):\n    a = texts.wrap(texts.whisper(rows[0]))\n    b = texts.wrap(texts.whisper(rows[1]))\n    return a + b\n"
        ),
    )
    .unwrap();
    let cc = json!({"id": "cc-habit", "set": "tiny", "kind": "completion", "language": "python",
                    "query": page, "filepath": "page.py", "symbol": "whisper",
                    "call_line": page.lines().count(),
                    "relevant": [{"filepath": "texts.py", "start_line": 9, "end_line": 10}]});
    let queries = f.root.path().join("habit.jsonl");
    write_queries(&queries, &[cc]);
    let out = f.root.path().join("habit-out.jsonl");
    let (status, stdout, stderr) = eval_completion(
        &f,
        &queries,
        &["--variants", "on+cache0,on", "--out", out.to_str().unwrap()],
    );
    assert!(status.success(), "{stdout}\n{stderr}");
    let rows = read_results(&out);
    let text = |i: usize| rows[i]["text"].as_str().unwrap().to_string();
    assert_eq!(rows[0]["callee_allowed"], true, "{}", rows[0]);
    // The premise: the model alone writes another of the module's names.
    assert!(!text(0).starts_with("whisper"), "{:?}", text(0));
    assert!(text(1).starts_with("whisper("), "{:?}", text(1));
    assert_eq!(rows[1]["identifier_match"], true);
}

/// `--prompts-only` builds every prompt without the model (the prompt columns are measured,
/// the answers are not), and `--only` runs the model on the named queries alone: the others
/// pass through the service unmeasured, and an `--only` file naming no query of the set is an
/// error.
#[test]
fn eval_completion_mode_builds_prompts_alone_or_for_named_queries() {
    let f = Fixture::new();
    let first = completion_query(&f);
    let mut second = first.clone();
    second["id"] = json!("second");
    let queries = f.root.path().join("completion.jsonl");
    write_queries(&queries, &[first, second]);
    let run = |extra: &[&str], out: &Path| {
        let mut args = vec!["--variants", "on", "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        eval_completion(&f, &queries, &args)
    };
    let row = |stdout: &str| completion_row(stdout, "on");

    let out = f.root.path().join("prompts.jsonl");
    let (status, stdout, stderr) = run(&["--prompts-only"], &out);
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("no model ran"), "{stdout}");
    let on = row(&stdout);
    assert_eq!(on[0], 2.0, "{stdout}");
    assert_eq!((on[1], on[4], on[5]), (0.0, 1.0, 1.0), "{stdout}");
    let rows = read_results(&out);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["text"], "", "no model ran");
    assert!(
        rows[0]["prompt"]
            .as_str()
            .unwrap()
            .contains("def render_html_table"),
        "{}",
        rows[0]["prompt"]
    );

    let ids = f.root.path().join("ids.txt");
    std::fs::write(&ids, "\nsecond\n").unwrap();
    let out = f.root.path().join("only.jsonl");
    let (status, stdout, stderr) = run(&["--only", ids.to_str().unwrap()], &out);
    assert!(status.success(), "{stdout}\n{stderr}");
    let on = row(&stdout);
    assert_eq!(on[0], 1.0, "only the named query is measured: {stdout}");
    assert_eq!(on[1], 1.0, "the model ran on it: {stdout}");
    let rows = read_results(&out);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], "second");

    std::fs::write(&ids, "not-in-the-set\n").unwrap();
    let (status, _, stderr) = run(&["--only", ids.to_str().unwrap()], &out);
    assert!(!status.success());
    assert!(stderr.contains("--only"), "{stderr}");
    let (status, _, stderr) = run(&["--only", "/nonexistent/ids.txt"], &out);
    assert!(!status.success());
    assert!(stderr.contains("cannot read --only"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Not ignored without --mode completion.
    let (status, _, stderr) = f.eval(&queries, &["--prompts-only"]);
    assert!(!status.success());
    assert!(stderr.contains("need --mode completion"), "{stderr}");
}

/// A small tree in five languages: in each, a documented definition and a call of it from
/// another file (through a module prefix, so the call's 40 lines never name it); in Rust also
/// a documented function inside a macro call.
fn write_multilanguage_tree(dir: &Path) {
    let files: &[(&str, &str)] = &[
        (
            "lib/strings.py",
            "def normalize_whitespace(text):\n    \"\"\"Collapse runs of spaces and tabs into single spaces.\"\"\"\n    return \" \".join(text.split())\n\n\ndef title_case_words(text):\n    \"\"\"Capitalize the first letter of every word in the text.\n\n    More detail.\n    \"\"\"\n",
        ),
        (
            "app.py",
            "import lib.strings as s\n\n\ndef clean(value):\n    stripped = value.strip()\n    return s.normalize_whitespace(stripped)\n",
        ),
        (
            "src/parse.rs",
            "/// Parses a comma separated list of integers.\n#[inline]\npub fn parse_integer_list(text: &str) -> Vec<i64> {\n    text.split(',').filter_map(|p| p.trim().parse().ok()).collect()\n}\n\nffi_fn! {\n    /// Splits a line into trimmed fields at every tab.\n    pub fn split_tab_fields(line: &str) -> Vec<&str> {\n        line.split('\\t').map(str::trim).collect()\n    }\n}\n",
        ),
        (
            "src/main.rs",
            "mod parse;\nuse parse::*;\n\nfn main() {\n    // (Rust's tags query tags plain calls, not `path::f(…)`.)\n    let values = parse_integer_list(\"1,2,3\");\n    println!(\"{values:?}\");\n}\n",
        ),
        (
            "util/strings.go",
            "package util\n\n// ReverseString returns the characters of a string in reverse order.\nfunc ReverseString(s string) string {\n\tr := []rune(s)\n\tfor i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {\n\t\tr[i], r[j] = r[j], r[i]\n\t}\n\treturn string(r)\n}\n",
        ),
        (
            "main.go",
            "package main\n\nimport \"example.com/x/util\"\n\nfunc main() {\n\tprintln(util.ReverseString(\"abc\"))\n}\n",
        ),
        (
            "web/format.ts",
            "/**\n * Formats a byte count as a human readable size.\n */\nexport function formatByteSize(bytes: number): string {\n  return `${(bytes / 1024).toFixed(1)} KiB`;\n}\n",
        ),
        (
            "web/view.ts",
            "import * as fmt from \"./format\";\n\nexport function describe(size: number): string {\n  return \"size: \" + fmt.formatByteSize(size);\n}\n",
        ),
        (
            "java/Geometry.java",
            "public class Geometry {\n    /**\n     * Computes the area of a circle with the given radius.\n     */\n    public static double circleArea(double radius) {\n        return Math.PI * radius * radius;\n    }\n}\n",
        ),
        (
            "java/App.java",
            "public class App {\n    public static void main(String[] args) {\n        System.out.println(Geometry.circleArea(2.0));\n    }\n}\n",
        ),
    ];
    for (rel, text) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// `tabby eval generate` of `src` into `out` as the set `tiny`.
fn generate_tiny_set(root: &Path, src: &Path, out: &Path) -> (ExitStatus, String, String) {
    run_tabby(
        root,
        &[
            "eval",
            "generate",
            "--src",
            src.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--name",
            "tiny",
        ],
    )
}

/// A temporary root with `write_multilanguage_tree` in `src-tree/` and its set in `set/`.
fn tiny_set() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("src-tree");
    write_multilanguage_tree(&src);
    let set = root.path().join("set");
    let (status, stdout, stderr) = generate_tiny_set(root.path(), &src, &set);
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    (root, src, set)
}

#[test]
fn eval_generate_builds_a_set_in_every_language_with_tags() {
    let (root, src, out) = tiny_set();
    let generate = |out: &Path| generate_tiny_set(root.path(), &src, out);
    let queries = read_results(&out.join("queries.jsonl"));
    let nl: Vec<&Value> = queries.iter().filter(|q| q["kind"] == "nl").collect();
    let cc: Vec<&Value> = queries
        .iter()
        .filter(|q| q["kind"] == "completion")
        .collect();
    let find = |sentence: &str| {
        *nl.iter()
            .find(|q| q["query"] == sentence)
            .unwrap_or_else(|| panic!("no nl query {sentence:?} in {nl:#?}"))
    };
    // One documented definition per language, found by its doc's first sentence, with the
    // definition's lines as the target (Go's leading name dropped).
    let mut targets = Vec::new();
    for (sentence, file, start, end) in [
        (
            "Collapse runs of spaces and tabs into single spaces.",
            "lib/strings.py",
            1,
            3,
        ),
        (
            "Capitalize the first letter of every word in the text.",
            "lib/strings.py",
            6,
            10,
        ),
        (
            "Parses a comma separated list of integers.",
            "src/parse.rs",
            3,
            5,
        ),
        // A function in a macro call's body, which tree-sitter leaves unparsed.
        (
            "Splits a line into trimmed fields at every tab.",
            "src/parse.rs",
            9,
            11,
        ),
        (
            "returns the characters of a string in reverse order.",
            "util/strings.go",
            4,
            10,
        ),
        (
            "Formats a byte count as a human readable size.",
            "web/format.ts",
            4,
            6,
        ),
        (
            "Computes the area of a circle with the given radius.",
            "java/Geometry.java",
            5,
            7,
        ),
    ] {
        targets.push((file, start));
        let q = find(sentence);
        assert_eq!(q["corpus"], "nodocs");
        assert_eq!(
            q["relevant"],
            json!([{"filepath": file, "start_line": start, "end_line": end}]),
            "{sentence}"
        );
    }
    assert_eq!(nl.len(), 7, "{nl:#?}");
    // The nodocs corpus blanks exactly those docs, line numbers kept; a docstring that was its
    // body's only statement becomes `...`.
    let nodocs = |rel: &str| std::fs::read_to_string(out.join("corpus-nodocs").join(rel)).unwrap();
    let full = |rel: &str| std::fs::read_to_string(out.join("corpus-full").join(rel)).unwrap();
    for rel in [
        "lib/strings.py",
        "src/parse.rs",
        "util/strings.go",
        "web/format.ts",
        "java/Geometry.java",
    ] {
        assert_eq!(
            nodocs(rel).lines().count(),
            full(rel).lines().count(),
            "{rel}"
        );
        for sentence in [
            "Collapse",
            "Capitalize",
            "Parses a comma",
            "Splits a line",
            "returns the characters",
            "Formats a byte",
            "Computes the area",
        ] {
            assert!(
                !nodocs(rel).contains(sentence),
                "{rel} still holds {sentence:?}"
            );
        }
    }
    // ... and nothing more: each definition's first line is still there (a Rust `///` line's
    // node ends on the next line, which once blanked the `fn` line too).
    for (rel, start) in targets {
        let line = full(rel).lines().nth(start - 1).unwrap().to_string();
        assert!(!line.trim().is_empty(), "{rel}:{start}");
        assert_eq!(
            nodocs(rel).lines().nth(start - 1).unwrap(),
            line,
            "{rel}:{start}"
        );
    }
    let py: Vec<String> = nodocs("lib/strings.py")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(py[1], "", "{py:?}");
    assert_eq!(py[6], "    ...", "{py:?}");
    assert_eq!(full("app.py"), nodocs("app.py"));

    // Completion: each cross-file call, its query the lines before the name, never naming it.
    let mut callees: Vec<&str> = cc.iter().map(|q| q["symbol"].as_str().unwrap()).collect();
    callees.sort();
    assert_eq!(
        callees,
        [
            "ReverseString",
            "circleArea",
            "formatByteSize",
            "normalize_whitespace",
            "parse_integer_list"
        ]
    );
    for q in &cc {
        let symbol = q["symbol"].as_str().unwrap();
        let text = q["query"].as_str().unwrap();
        assert!(!text.contains(symbol), "{q}");
        let file = full(q["filepath"].as_str().unwrap());
        let line = q["cursor"]["line"].as_u64().unwrap() as usize;
        let column = q["cursor"]["column"].as_u64().unwrap() as usize;
        assert!(
            file.lines().nth(line - 1).unwrap()[column..].starts_with(symbol),
            "{q}"
        );
        assert!(
            text.ends_with(&file.lines().nth(line - 1).unwrap()[..column]),
            "{q}"
        );
    }
    let reverse = cc.iter().find(|q| q["symbol"] == "ReverseString").unwrap();
    assert_eq!(reverse["filepath"], "main.go");
    assert_eq!(
        reverse["relevant"],
        json!([{"filepath": "util/strings.go", "start_line": 4, "end_line": 10}])
    );

    // An output directory inside the tree is not read back as source.
    let inside = src.join("generated-set");
    for _ in 0..2 {
        let (status, stdout, stderr) = generate(&inside);
        assert!(status.success(), "{stdout}{stderr}");
        assert!(stdout.contains("tiny: 10 files"), "{stdout}");
    }
    std::fs::remove_dir_all(&inside).unwrap();
    // A symlink to a file outside the tree is not followed.
    let secret = root.path().join("secret.py");
    std::fs::write(
        &secret,
        "def leaked_secret_function():\n    \"\"\"Returns the launch codes of the base.\"\"\"\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&secret, src.join("link.py")).unwrap();

    // Seeded: a second run writes the same set.
    let again = root.path().join("again");
    assert!(generate(&again).0.success());
    assert_eq!(
        std::fs::read(out.join("queries.jsonl")).unwrap(),
        std::fs::read(again.join("queries.jsonl")).unwrap()
    );
    assert!(!again.join("corpus-full/link.py").exists());

    // The set runs through `tabby eval`, with the service's row and the ranker's features.
    let features = root.path().join("features.jsonl");
    let (status, stdout, stderr) = run_tabby(
        root.path(),
        &[
            "eval",
            "--queries",
            out.join("queries.jsonl").to_str().unwrap(),
            "--corpus",
            out.to_str().unwrap(),
            "--embedding",
            "hash",
            "--features-out",
            features.to_str().unwrap(),
        ],
    );
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("ranker: linear-v4"), "{stdout}");
    assert!(stdout.contains("nl expansion: nl-expansion-v1"), "{stdout}");
    assert_eq!(table_row(&stdout, "| service | nl |")[0], 7.0);
    assert_eq!(table_row(&stdout, "| service | completion |")[0], 5.0);
    let rows = read_results(&features);
    assert_eq!(rows.len(), queries.len());
    for row in &rows {
        let names = row["features"].as_array().unwrap();
        assert!(
            names.iter().any(|n| n == "module_named"),
            "content features: {row}"
        );
        for c in row["candidates"].as_array().unwrap() {
            assert_eq!(c["x"].as_array().unwrap().len(), names.len(), "{row}");
            // Each candidate names its chunk, so features can be studied against its text.
            assert!(
                c["filepath"].is_string() && c["start_line"].as_u64() >= Some(1),
                "{c}"
            );
            assert!(c["end_line"].as_u64() >= c["start_line"].as_u64(), "{c}");
            // Which of the query's relevant ranges it overlaps, by index: what the trainer
            // needs to measure Recall@10 as the scorer does (the share of ranges found).
            let hits = c["hits"].as_array().unwrap();
            assert_eq!(c["relevant"] == true, !hits.is_empty(), "{c}");
            let count = row["relevant_count"].as_u64().unwrap();
            assert!(hits.iter().all(|h| h.as_u64() < Some(count)), "{row}");
        }
    }
    assert!(
        rows.iter().any(|r| r["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["relevant"] == true)),
        "some candidate is labelled relevant"
    );
}

#[test]
fn eval_generate_and_ranker_reject_bad_input_with_a_message() {
    let root = tempfile::tempdir().unwrap();
    let generate = |src: &str, name: &str| {
        let (status, _, stderr) = run_tabby(
            root.path(),
            &[
                "eval", "generate", "--src", src, "--out", "x", "--name", name,
            ],
        );
        assert!(!status.success(), "{stderr}");
        stderr
    };
    let stderr = generate("/nonexistent/tree", "n");
    assert!(stderr.contains("is not a directory"), "{stderr}");
    let empty = root.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("notes.txt"), "just words").unwrap();
    let stderr = generate(empty.to_str().unwrap(), "n");
    assert!(stderr.contains("holds no source files"), "{stderr}");
    let stderr = generate(empty.to_str().unwrap(), "../up");
    assert!(stderr.contains("plain word"), "{stderr}");

    let f = Fixture::new();
    let ranker = f.root.path().join("ranker.json");
    std::fs::write(
        &ranker,
        r#"{"version":"x","features":["bias"],"weights":{"code":[1],"nl":[1]}}"#,
    )
    .unwrap();
    let (status, _, stderr) = f.eval(&f.queries, &["--ranker", ranker.to_str().unwrap()]);
    assert!(!status.success());
    assert!(stderr.contains("trained on the features"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // A question expansion table: a bad one is refused naming its line; `none` searches
    // questions by their own words, and the header says so.
    let table = f.root.path().join("expansion.tsv");
    std::fs::write(&table, "# t\n@max\t6\n@weight\t1\nword\tcode:x\n").unwrap();
    let (status, _, stderr) = f.eval(&f.queries, &["--nl-expansion", table.to_str().unwrap()]);
    assert!(!status.success());
    assert!(
        stderr.contains("line 4: a score is not a number"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (status, stdout, stderr) = f.eval(&f.queries, &["--nl-expansion", "none"]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("nl expansion: none"), "{stdout}");
    let (status, _, stderr) = f.eval(
        &f.queries,
        &["--mode", "completion", "--nl-expansion", "none"],
    );
    assert!(!status.success());
    assert!(stderr.contains("use it with --mode retrieval"), "{stderr}");
}

/// `scripts/eval/train_expansion.py` learns the question expansion table in the index's own
/// words: its port of the tokenizer and stemmer must give the words the BM25 leg searches for
/// (a drift would leave table rows that no question or chunk ever holds).
#[test]
fn the_expansion_trainer_reads_words_as_the_index_does() {
    use std::io::Write;
    let lines = [
        "Returns the readFileSync of HTTPServer2 and parse_config",
        "Attaches encoding; opened files, raised errors, hopping agreed creates parsing arguments",
        "XMLHttpRequest getHTTPResponseCode utf8Decode v2Beta __init__ _private CONSTANT_NAME",
        "naïve Café résumé straße ÜBER_größe 東京 x1y2z3 a-b.c/d:e",
        "is it the of to a an wassup agreeing caresses ponies ties caress cats feed bled sing",
        &"long".repeat(20),
    ];
    let mut child = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/eval/train_expansion.py"))
        .arg("--print-words")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the training script");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", lines.join("\n")).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let printed: Vec<&str> = printed.lines().collect();
    assert_eq!(printed.len(), lines.len(), "{printed:?}");
    for (line, python) in lines.iter().zip(printed) {
        let rust = tabby::services::code::QueryStrategy::Tuned.bm25_terms(line);
        assert_eq!(python, rust.join(" "), "{line}");
    }
}

/// The extra training packages (`scripts/eval/training_packages.tsv`, read by
/// `training_sets.py --extra`) hold no package reserved for evaluation, no dev package and no
/// member of their families, and the script refuses such a row and skips a source tree that
/// carries a vendored copy of one.
#[test]
fn the_training_package_list_keeps_held_out_packages_out() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/eval");
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tree.path().join("src/pkg/_vendored/requests")).unwrap();
    std::fs::create_dir_all(tree.path().join("clean/pkg/sub")).unwrap();
    let program = r#"
import sys
sys.path.insert(0, sys.argv[1])
import training_sets as T
rows = T.read_extra(sys.argv[1] + '/training_packages.tsv')
assert len(rows) >= 300, len(rows)
assert {r[4] for r in rows} == {'python', 'go'}, {r[4] for r in rows}
for name, registry, package, version, language in rows:
    T.refuse_reserved(registry, package)
    T.refuse_family(registry, package)
    assert registry in ('pypi', 'debian'), registry
    assert registry == 'debian' or version, name
for registry, package in [('pypi', 'click'), ('pypi', 'click-plugins'), ('pypi', 'Pydantic_Settings'),
                          ('pypi', 'markdown-it-py'), ('debian', 'golang-github-spf13-pflag-dev'),
                          ('debian', 'golang-github-gin-contrib-sse-dev')]:
    try:
        T.refuse_reserved(registry, package)
        T.refuse_family(registry, package)
    except SystemExit as e:
        assert 'held out' in str(e) or 'reserved' in str(e), e
    else:
        raise AssertionError(package + ' was not refused')
assert T.vendored_copy(sys.argv[2] + '/src').endswith('_vendored/requests'), T.vendored_copy(sys.argv[2] + '/src')
assert T.vendored_copy(sys.argv[2] + '/clean') is None
print('ok', len(rows))
"#;
    let stdout = python3(&[
        "-c".as_ref(),
        program.as_ref(),
        scripts.as_os_str(),
        tree.path().as_os_str(),
    ]);
    assert!(stdout.starts_with("ok "), "{stdout}");
}

/// Runs `python3 ARGS`, checks that it succeeded and returns what it printed.
fn python3(args: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `scripts/eval/evallike_sets.py cut` turns a set whose corpus-nodocs blanks every queried doc
/// into groups that each blank only their own queries' docs: every other doc is back, and no
/// line moves.
#[test]
fn evallike_groups_blank_only_their_own_docs() {
    let (root, _, set) = tiny_set();
    let nl: Vec<Value> = read_results(&set.join("queries.jsonl"))
        .into_iter()
        .filter(|q| q["kind"] == "nl")
        .collect();
    assert!(nl.len() >= 5, "{nl:?}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/eval/evallike_sets.py");
    let groups_dir = root.path().join("groups");
    let groups: Vec<String> = python3(&[
        script.as_os_str(),
        "cut".as_ref(),
        set.as_os_str(),
        groups_dir.as_os_str(),
        "--group".as_ref(),
        "4".as_ref(),
    ])
    .lines()
    .map(str::to_string)
    .collect();
    assert_eq!(groups.len(), 2, "{groups:?}");
    let files: Vec<String> = nl
        .iter()
        .flat_map(|q| q["relevant"].as_array().unwrap().iter())
        .map(|r| r["filepath"].as_str().unwrap().to_string())
        .collect();
    let mut seen = Vec::new();
    for group in &groups {
        let group = Path::new(group);
        let own: Vec<String> = read_results(&group.join("queries.jsonl"))
            .iter()
            .map(|q| q["id"].as_str().unwrap().to_string())
            .collect();
        assert!(!own.is_empty() && own.len() < nl.len(), "{own:?}");
        let nodocs: String = files
            .iter()
            .map(|f| {
                let blanked = std::fs::read_to_string(group.join("corpus-nodocs").join(f)).unwrap();
                let full = std::fs::read_to_string(set.join("corpus-full").join(f)).unwrap();
                assert_eq!(blanked.lines().count(), full.lines().count(), "{f}");
                blanked
            })
            .collect();
        for q in &nl {
            let id = q["id"].as_str().unwrap();
            let sentence = q["query"].as_str().unwrap();
            let mine = own.iter().any(|o| o == id);
            assert_eq!(
                !nodocs.contains(sentence),
                mine,
                "{id} ({sentence}) in {}",
                group.display()
            );
        }
        seen.extend(own);
    }
    seen.sort();
    let mut all: Vec<String> = nl
        .iter()
        .map(|q| q["id"].as_str().unwrap().to_string())
        .collect();
    all.sort();
    assert_eq!(seen, all);
}

/// `scripts/eval/try_nl_feature.py` scores questions from `tabby eval --features-out` with the
/// shipped ranker: at weight 0 its figure is the service row of `tabby eval` on the same set.
#[test]
fn the_feature_trial_starts_from_the_service_s_own_figure() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("src-tree");
    let topics = [
        "parse",
        "render",
        "compress",
        "encrypt",
        "upload",
        "resize",
        "merge",
        "validate",
        "schedule",
        "translate",
        "index",
        "backup",
    ];
    for (i, topic) in topics.iter().enumerate() {
        let dir = src.join(format!("pkg{}", i % 4));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("{topic}.py")),
            format!(
                "def {topic}_items(items, limit):\n    \"\"\"Applies the {topic} step to every item up to the limit.\"\"\"\n    out = []\n    for item in items[:limit]:\n        out.append(('{topic}', item))\n    return out\n\n\ndef helper_{i}(value):\n    return value * {i}\n"
            ),
        )
        .unwrap();
    }
    let set = root.path().join("sets").join("t");
    let (status, stdout, stderr) = generate_tiny_set(root.path(), &src, &set);
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let ranker = root.path().join("ranker");
    std::fs::create_dir_all(ranker.join("t")).unwrap();
    std::fs::write(ranker.join("splits.tsv"), "t\tdev\tpython\tdefault\n").unwrap();
    let (status, stdout, stderr) = run_tabby(
        root.path(),
        &[
            "eval",
            "--queries",
            set.join("queries.jsonl").to_str().unwrap(),
            "--corpus",
            set.to_str().unwrap(),
            "--legs",
            "service",
            "--embedding",
            "hash",
            "--features-out",
            ranker.join("t/features.jsonl").to_str().unwrap(),
        ],
    );
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let service = table_row(&stdout, "| service | nl |");
    assert!(service[0] >= 10.0, "{stdout}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/eval/try_nl_feature.py");
    let printed = python3(&[
        script.as_os_str(),
        "name-extends".as_ref(),
        ranker.as_os_str(),
        root.path().join("sets").as_os_str(),
        "--weights".as_ref(),
        "0,1".as_ref(),
    ]);
    let first = printed.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "weight 0.0: mean of 1 sets {:.3} / {:.3}",
            service[3], service[4]
        )),
        "{printed}\n{stdout}"
    );
    assert_eq!(printed.lines().count(), 2, "{printed}");
}
