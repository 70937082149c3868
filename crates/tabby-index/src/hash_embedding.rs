//! A deterministic, model-free embedding: signed feature hashing of a text's lower-cased code
//! tokens and their sub-words into `dim` dimensions, L2-normalised. It is the "fake embedding"
//! used by tests, `tabby eval` and benchmarks: lexical, instant, and the same on every machine.

use async_trait::async_trait;
use tabby_common::index::code::tokenize_code;
use tabby_inference::{Embedding, ModelError};

pub struct HashEmbedding {
    dim: usize,
}

impl HashEmbedding {
    pub fn new(dim: usize) -> Self {
        Self { dim: dim.max(1) }
    }

    pub fn model_id(&self) -> String {
        format!("builtin/hash-{}", self.dim)
    }

    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        for token in tokenize_code(text) {
            let lower = token.to_lowercase();
            add(&mut v, &lower, 1.0);
            for part in lower.split('_').filter(|p| !p.is_empty() && *p != lower) {
                add(&mut v, part, 0.5);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

fn add(v: &mut [f32], token: &str, weight: f32) {
    // FNV-1a: stable across platforms and releases.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in token.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    let index = (h % v.len() as u64) as usize;
    let sign = if (h >> 63) & 1 == 1 { -1.0 } else { 1.0 };
    v[index] += sign * weight;
}

#[async_trait]
impl Embedding for HashEmbedding {
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(inputs.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_normalised_and_lexical() {
        let e = HashEmbedding::new(64);
        let a = e.embed_one("fn parse_config(path)");
        assert_eq!(a, e.embed_one("fn parse_config(path)"));
        assert!((a.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f32>();
        let near = e.embed_one("parse config file path");
        let far = e.embed_one("render widget color");
        assert!(dot(&a, &near) > dot(&a, &far));
    }
}
