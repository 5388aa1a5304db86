//! `GET /metrics`: idem's counters, gauge and histogram (and anything else recorded
//! through the `metrics` facade) as Prometheus text.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The buckets of `idem_store_seconds`, in seconds: from a tenth of a millisecond (a Redis
/// decision, a replay from the process) to past the store's timeout (1 s by default), so
/// that a timed-out operation lands above the timeout's bucket. Exported as a histogram,
/// not a summary: buckets add up across instances, a summary's quantiles do not.
const STORE_SECONDS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The process's Prometheus recorder, installed as the `metrics` facade's global recorder
/// the first time it is asked for. `None` when another recorder was installed first.
fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full("idem_store_seconds".into()), &STORE_SECONDS)
                .and_then(PrometheusBuilder::install_recorder)
                .ok()
        })
        .as_ref()
}

/// Installs the recorder now, so that what happens before the first scrape is counted.
pub(crate) fn install() {
    let _ = handle();
}

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus text: idem's counters and histograms", content_type = "text/plain", body = String),
))]
pub(crate) async fn scrape() -> String {
    handle().map(PrometheusHandle::render).unwrap_or_default()
}
