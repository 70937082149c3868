//! Choosing the next token from the model's logits: OpenAI's presence and frequency penalties
//! on the logits, then greedy (temperature 0) or temperature and nucleus (top-p) sampling with a
//! seeded generator, so the same seed gives the same text.
//!
//! Penalties are applied to logits, never to probabilities (subtracting a penalty from a
//! probability makes it negative, which is what broke the sampler we used before). Logits that
//! are not numbers never win and never get weight; a step with no finite logit is an error, not
//! a panic.

use std::collections::HashMap;

/// Sampling settings of one request, checked by [`Sampler::new`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 (or below 1e-5): greedy.
    pub temperature: f32,
    /// `None` or 1: every token may be drawn.
    pub top_p: Option<f32>,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub seed: u64,
}

/// OpenAI's range for both penalties.
const MAX_PENALTY: f32 = 2.0;
/// Above this, sampling is uniform noise for any model; OpenAI allows 2.
const MAX_TEMPERATURE: f32 = 2.0;
/// Temperatures this small are greedy (dividing by them overflows).
const GREEDY_BELOW: f32 = 1e-5;

/// The sampling state of one generation: its parameters, its random stream and the counts of
/// the tokens generated so far (for the penalties).
pub struct Sampler {
    params: SamplingParams,
    rng: SplitMix64,
    counts: HashMap<u32, u32>,
    /// Scratch for nucleus sampling: (token, weight) of the candidates.
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    /// Checks the parameters; the error names the first one that is out of range.
    pub fn new(params: SamplingParams) -> Result<Self, String> {
        let t = params.temperature;
        if !t.is_finite() || !(0.0..=MAX_TEMPERATURE).contains(&t) {
            return Err(format!(
                "temperature must be between 0 and {MAX_TEMPERATURE}, got {t}"
            ));
        }
        if let Some(p) = params.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(format!("top_p must be in (0, 1], got {p}"));
        }
        for (name, v) in [
            ("presence_penalty", params.presence_penalty),
            ("frequency_penalty", params.frequency_penalty),
        ] {
            if !v.is_finite() || !(-MAX_PENALTY..=MAX_PENALTY).contains(&v) {
                return Err(format!(
                    "{name} must be between -{MAX_PENALTY} and {MAX_PENALTY}, got {v}"
                ));
            }
        }
        Ok(Self {
            params,
            rng: SplitMix64(params.seed),
            counts: HashMap::new(),
            candidates: Vec::new(),
        })
    }

    /// Whether every step picks the best token (drafted tokens can then be checked against the
    /// model's own choice).
    pub fn is_greedy(&self) -> bool {
        self.params.temperature < GREEDY_BELOW
    }

    /// Picks the next token from `logits` (modified in place by the penalties).
    pub fn sample(&mut self, logits: &mut [f32]) -> Result<u32, String> {
        self.apply_penalties(logits);
        let Some((best, max)) = argmax(logits) else {
            return Err("the model produced no valid logits for this step".into());
        };
        let t = self.params.temperature;
        if t < GREEDY_BELOW {
            return Ok(best);
        }
        // Weights relative to the best token: exp((l - max) / t) is in (0, 1] for finite l.
        self.candidates.clear();
        let mut total = 0.0f64;
        for (id, &l) in logits.iter().enumerate() {
            if l.is_finite() {
                let w = ((l - max) / t).exp();
                if w > 0.0 {
                    self.candidates.push((id as u32, w));
                    total += w as f64;
                }
            }
        }
        if let Some(p) = self.params.top_p.filter(|&p| p < 1.0) {
            self.candidates
                .sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut kept = 0.0f64;
            let mut keep = self.candidates.len();
            for (i, &(_, w)) in self.candidates.iter().enumerate() {
                kept += w as f64;
                if kept >= p as f64 * total {
                    keep = i + 1;
                    break;
                }
            }
            self.candidates.truncate(keep);
            total = kept.min(total);
        }
        let mut target = self.rng.next_f64() * total;
        for &(id, w) in &self.candidates {
            target -= w as f64;
            if target < 0.0 {
                return Ok(id);
            }
        }
        // Rounding left the target at the very end: the last candidate it reached.
        Ok(self.candidates.last().map_or(best, |&(id, _)| id))
    }

    /// Records a generated token for the penalties of later steps.
    pub fn accept(&mut self, token: u32) {
        *self.counts.entry(token).or_insert(0) += 1;
    }

    /// OpenAI's formula: `logit -= count * frequency_penalty + (count > 0) * presence_penalty`.
    fn apply_penalties(&self, logits: &mut [f32]) {
        let (presence, frequency) = (self.params.presence_penalty, self.params.frequency_penalty);
        if presence == 0.0 && frequency == 0.0 {
            return;
        }
        for (&id, &count) in &self.counts {
            if let Some(l) = logits.get_mut(id as usize) {
                *l -= count as f32 * frequency + presence;
            }
        }
    }
}

/// The token with the largest finite logit (lowest id on ties) and that logit.
fn argmax(logits: &[f32]) -> Option<(u32, f32)> {
    let mut best: Option<(u32, f32)> = None;
    for (id, &l) in logits.iter().enumerate() {
        if l.is_finite() && best.is_none_or(|(_, b)| l > b) {
            best = Some((id as u32, l));
        }
    }
    best
}

/// A small seeded generator (SplitMix64): reproducible across platforms and versions.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            top_p: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 1,
        }
    }

    fn sampler(p: SamplingParams) -> Sampler {
        Sampler::new(p).unwrap()
    }

    #[test]
    fn greedy_takes_the_largest_finite_logit() {
        let mut s = sampler(params());
        assert_eq!(s.sample(&mut [0.1, f32::NAN, 3.0, f32::INFINITY]), Ok(2));
        assert_eq!(s.sample(&mut [1.0, 1.0]), Ok(0));
    }

    #[test]
    fn no_finite_logit_is_an_error() {
        let mut s = sampler(SamplingParams {
            temperature: 0.7,
            ..params()
        });
        assert!(s.sample(&mut [f32::NAN, f32::NEG_INFINITY]).is_err());
        assert!(s.sample(&mut []).is_err());
    }

    #[test]
    fn presence_penalty_moves_greedy_off_a_seen_token() {
        let mut s = sampler(SamplingParams {
            presence_penalty: 1.0,
            ..params()
        });
        assert_eq!(s.sample(&mut [2.0, 1.5]), Ok(0));
        s.accept(0);
        assert_eq!(s.sample(&mut [2.0, 1.5]), Ok(1));
    }

    #[test]
    fn frequency_penalty_grows_with_the_count() {
        let mut s = sampler(SamplingParams {
            frequency_penalty: 0.3,
            ..params()
        });
        s.accept(0);
        assert_eq!(s.sample(&mut [2.0, 1.5]), Ok(0)); // 2.0 - 0.3 > 1.5
        s.accept(0);
        assert_eq!(s.sample(&mut [2.0, 1.5]), Ok(1)); // 2.0 - 0.6 < 1.5
    }

    #[test]
    fn penalties_with_sampling_never_give_invalid_weights() {
        let mut s = sampler(SamplingParams {
            temperature: 0.9,
            top_p: Some(0.9),
            presence_penalty: 2.0,
            frequency_penalty: 2.0,
            seed: 42,
        });
        let logits: Vec<f32> = (0..64).map(|i| (i % 7) as f32 * 0.1).collect();
        for _ in 0..200 {
            let t = s.sample(&mut logits.clone()).unwrap();
            assert!(t < 64);
            s.accept(t);
        }
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // Weights at t = 1: token 0 holds ~0.88 of the mass; top_p 0.5 keeps it alone.
        let mut s = sampler(SamplingParams {
            temperature: 1.0,
            top_p: Some(0.5),
            seed: 3,
            ..params()
        });
        for _ in 0..100 {
            assert_eq!(s.sample(&mut [4.0, 2.0, 0.0, 0.0]), Ok(0));
        }
    }

    #[test]
    fn sampling_follows_the_distribution_and_the_seed() {
        let draw = |seed| {
            let mut s = sampler(SamplingParams {
                temperature: 1.0,
                seed,
                ..params()
            });
            (0..2000)
                .map(|_| s.sample(&mut [0.0, (3.0f32).ln()]).unwrap())
                .collect::<Vec<_>>()
        };
        let a = draw(9);
        assert_eq!(a, draw(9));
        assert_ne!(a, draw(10));
        // p(1) = 3/4.
        let ones = a.iter().filter(|&&t| t == 1).count() as f64 / a.len() as f64;
        assert!((ones - 0.75).abs() < 0.04, "{ones}");
    }

    #[test]
    fn out_of_range_parameters_are_named() {
        let bad = [
            (
                SamplingParams {
                    temperature: f32::NAN,
                    ..params()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: -1.0,
                    ..params()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_p: Some(0.0),
                    ..params()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: Some(1.5),
                    ..params()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    presence_penalty: 3.0,
                    ..params()
                },
                "presence_penalty",
            ),
            (
                SamplingParams {
                    frequency_penalty: f32::INFINITY,
                    ..params()
                },
                "frequency_penalty",
            ),
        ];
        for (p, name) in bad {
            let err = Sampler::new(p).err().unwrap();
            assert!(err.contains(name), "{err}");
        }
    }
}
