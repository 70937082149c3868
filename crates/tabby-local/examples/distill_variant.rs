// TEMPORARY experiment driver (not to be kept): distill one variant.
use std::{path::Path, time::Instant};
use tabby_local::embedding::distill::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let pooling = if a[2] == "token" { TokenPooling::Token } else { TokenPooling::Mean };
    let dimensions = a[3].parse::<usize>().ok();
    let weighting = match a[4].as_str() {
        "none" => TokenWeighting::None,
        "logrank" => TokenWeighting::LogRank,
        s => TokenWeighting::Sif { a: s.trim_start_matches("sif").parse().unwrap() },
    };
    let src = Path::new(&std::env::var("HOME").unwrap()).join(".tabby/models/sentence-transformers/all-MiniLM-L6-v2");
    let t = Instant::now();
    let h = distill(&src, Path::new(&a[1]), &DistillOptions { pooling, dimensions, weighting }, &|d, n| if d % 8192 < 1024 { eprintln!("{d}/{n} {:.1}s", t.elapsed().as_secs_f64()) }).unwrap();
    eprintln!("done in {:.1}s: {h:?}", t.elapsed().as_secs_f64());
}
