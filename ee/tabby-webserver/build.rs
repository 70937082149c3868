// Embeds the web UI (`ee/tabby-ui`: plain HTML, CSS and ES modules; no build step) into the
// binary: generates `$OUT_DIR/ui_assets.rs` with one `include_bytes!` per file.
use std::{env, fs, path::Path};

fn main() {
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    let ui = Path::new(&manifest).join("../tabby-ui");
    println!("cargo:rerun-if-changed={}", ui.display());
    let mut entries: Vec<_> = fs::read_dir(&ui)
        .expect("ee/tabby-ui exists")
        .filter_map(Result::ok)
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| e.path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("html" | "js" | "css" | "svg" | "png" | "ico" | "txt")
            )
        })
        .collect();
    entries.sort();
    let mut out = String::from("pub static UI_ASSETS: &[(&str, &[u8])] = &[\n");
    for path in &entries {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path.file_name().unwrap().to_string_lossy();
        let absolute = fs::canonicalize(path).expect("asset path");
        out.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            absolute.display().to_string()
        ));
    }
    out.push_str("];\n");
    let dest = Path::new(&env::var("OUT_DIR").expect("set by cargo")).join("ui_assets.rs");
    fs::write(dest, out).expect("write ui_assets.rs");
}
