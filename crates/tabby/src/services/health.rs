//! `GET /v1/health`: which models serve which role, the machine, and the build.

use serde::Serialize;
use tabby_common::config::{ModelConfig, ModelConfigGroup};
use utoipa::ToSchema;

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct HealthState {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_device: Option<String>,
    pub device: String,
    pub cuda_devices: Vec<String>,
    pub models: ModelsHealth,
    pub arch: String,
    pub cpu_info: String,
    pub cpu_count: usize,
    pub version: Version,
    /// `true` with the enterprise webserver, `false` with `--no-webserver`, `null` in a build
    /// without it.
    pub webserver: Option<bool>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ModelsHealth {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<ModelHealth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat: Option<ModelHealth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<ModelHealth>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelHealth {
    Remote {
        kind: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        model_name: Option<String>,
        api_endpoint: String,
    },
    Local {
        model_id: String,
        device: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        cuda_devices: Vec<String>,
    },
}

impl ModelHealth {
    pub fn from_config(config: &ModelConfig) -> Self {
        match config {
            ModelConfig::Http(http) => ModelHealth::Remote {
                kind: http.kind.clone(),
                model_name: http.model_name.clone(),
                api_endpoint: http.api_endpoint.clone().unwrap_or_default(),
            },
            ModelConfig::Local(local) => ModelHealth::Local {
                model_id: local.model_id.clone(),
                device: "cpu".into(),
                cuda_devices: vec![],
            },
        }
    }

    fn display_name(config: &ModelConfig) -> String {
        match config {
            ModelConfig::Http(http) => http.model_name.clone().unwrap_or_else(|| "Remote".into()),
            ModelConfig::Local(local) => local.model_id.clone(),
        }
    }
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Version {
    build_date: String,
    build_timestamp: String,
    git_sha: String,
    git_describe: String,
}

impl Version {
    fn current() -> Self {
        let timestamp: i64 = env!("TABBY_BUILD_TIMESTAMP").parse().unwrap_or_default();
        let date = chrono::DateTime::from_timestamp(timestamp, 0)
            .map(|d| d.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        Self {
            build_date: date,
            build_timestamp: timestamp.to_string(),
            git_sha: env!("TABBY_GIT_SHA").to_string(),
            // tabby-agent reads this with semver.coerce to decide which APIs exist.
            git_describe: format!("v{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

impl HealthState {
    pub fn new(models: &ModelConfigGroup, webserver: Option<bool>) -> Self {
        Self {
            model: models.completion.as_ref().map(ModelHealth::display_name),
            chat_model: models.chat.as_ref().map(ModelHealth::display_name),
            chat_device: None,
            device: "cpu".into(),
            cuda_devices: vec![],
            models: ModelsHealth {
                completion: models.completion.as_ref().map(ModelHealth::from_config),
                chat: models.chat.as_ref().map(ModelHealth::from_config),
                embedding: models.embedding.as_ref().map(ModelHealth::from_config),
            },
            arch: std::env::consts::ARCH.to_string(),
            cpu_info: cpu_brand().unwrap_or_else(|| "unknown".into()),
            cpu_count: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            version: Version::current(),
            webserver,
        }
    }
}

fn cpu_brand() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}
