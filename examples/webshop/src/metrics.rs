//! `GET /metrics`: idem's counters and histograms (and anything else recorded through the
//! `metrics` facade) as Prometheus text.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's Prometheus recorder, installed as the `metrics` facade's global recorder
/// the first time it is asked for. `None` when another recorder was installed first.
fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .as_ref()
}

/// Installs the recorder now, so that what happens before the first scrape is counted.
pub(crate) fn install() {
    let _ = handle();
}

/// `GET /metrics`.
pub(crate) async fn scrape() -> String {
    handle().map(PrometheusHandle::render).unwrap_or_default()
}
