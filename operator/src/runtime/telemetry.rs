//! Logging: JSON lines (default, for log pipelines) or text, filtered by `LOG_LEVEL` (already
//! validated by the configuration).

use tracing_subscriber::EnvFilter;

use crate::runtime::config::{LogFormat, OperatorConfig};

/// Installs the global subscriber. Safe to call once per process; a second call is ignored.
pub fn init(config: &OperatorConfig) {
    let filter = EnvFilter::try_new(&config.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match config.log_format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
