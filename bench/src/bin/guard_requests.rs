//! The requests of one `bench/http.sh` case, sent in-process (`tower::ServiceExt::oneshot`
//! on the bench server's routes, [`idem_bench::guard_cases`] on a `MemoryStore`, on a
//! one-worker runtime): no sockets, no kernel, so that a profile of the process
//! (`bench/profile.sh`, with `perf`) or an instruction count (`valgrind --tool=callgrind`)
//! shows the guard and the handler alone. Run it for two values of `n` and divide the
//! difference by theirs, so start-up and shut-down cancel out.
//!
//! `guard_requests <case> <n>`, where one request of a case is:
//!
//! | case | one request |
//! |---|---|
//! | `bare` | `POST /bare` (no guard, no store, no `Idem` layer) |
//! | `layered_bare` | `POST /layered`: the same under a route layer that does nothing |
//! | `avoid_repeat` | `POST` to `#[avoid_repeat]` (`expire`) from a new client |
//! | `avoid_repeat_layer` | the same under `AvoidRepeatLayer` |
//! | `avoid_repeat_finish` | the same under `#[avoid_repeat(release = "finish")]` |
//! | `form_bare` | `GET /plain/form` and `POST /plain/order` of the value it gave |
//! | `form` | `GET` a form token and `POST` the form with it (`VerifyFormTokenLayer`) |
//! | `form_replay_first` | the same with `with_replay(true)`: the post's response is kept |
//! | `order_bare` | `POST /plain/order` of a form (no token spent) |
//! | `form_replay` | a repeat `POST` of one spent token, answered with the kept response |
//! | `idempotency` | `POST` with a new `Idempotency-Key` (`IdempotencyLayer`) |
//! | `idempotency_replay` | `POST` with one key already answered: a replay |
//! | `lock` | `POST` from a new client to a handler that takes and releases its `Lock` |
//! | `work_bare` | not a request: the work a run-once call runs, called alone, with a new key and a small payload |
//! | `run_once` | the same work under `RunOnce::run` with a new key: begun, run, its result kept |
//! | `run_once_replay` | `RunOnce::run` with one key already run: its result decoded, the work not called |
//!
//! The replays' first request (which stores the response) runs before the `n`.
//!
//! Built with the feature `metrics`, idem's metrics are on and counted into a Prometheus
//! recorder (never rendered), installed before the first request.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderName, Request, StatusCode, header};
use idem_axum::MemoryStore;
use idem_bench::{CLIENT, guard_cases, unguarded_routes};
use idem_core::run_once::RunOnce;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use tower::ServiceExt;

const CASES: [&str; 16] = [
    "bare",
    "layered_bare",
    "avoid_repeat",
    "avoid_repeat_layer",
    "avoid_repeat_finish",
    "form_bare",
    "form",
    "form_replay_first",
    "order_bare",
    "form_replay",
    "idempotency",
    "idempotency_replay",
    "lock",
    "work_bare",
    "run_once",
    "run_once_replay",
];
const KEY: HeaderName = HeaderName::from_static("idempotency-key");
const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// A token's length, for the unguarded form's stand-in value.
const PLAIN_TOKEN: &str = "0000000000000000000000";

/// The app, the run-once calls, and the numbering of new clients and keys.
struct Driver {
    app: Router,
    once: RunOnce<MemoryStore>,
    next: u64,
}

/// A run-once call's payload and result: a message's charge and its receipt.
#[derive(Serialize, Deserialize)]
struct Charge {
    order: u64,
    cents: u64,
}

/// The work of the run-once cases.
async fn charge(charge: &Charge) -> Result<Charge, Infallible> {
    Ok(Charge {
        order: std::hint::black_box(charge.order),
        cents: charge.cents,
    })
}

impl Driver {
    /// A name no earlier request of this run used.
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("c-{}", self.next)
    }

    /// Sends `request`, checks its status and reads its body, as a server would send it.
    async fn send(&self, request: Request<Body>, replayed: bool) -> Bytes {
        let response = self.app.clone().oneshot(request).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers().contains_key(&REPLAYED), replayed);
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body")
    }

    async fn post(&self, path: &str, client: &str, key: Option<&str>, replayed: bool) {
        let mut request = Request::post(path).header(&CLIENT, client);
        if let Some(key) = key {
            request = request.header(&KEY, format!("\"{key}\""));
        }
        let request = request.body(Body::empty()).expect("a valid request");
        self.send(request, replayed).await;
    }

    /// `GET page` and answers the token (or stand-in) it gave.
    async fn page(&self, page: &str) -> String {
        let request = Request::get(page)
            .header(&CLIENT, "bench")
            .body(Body::empty())
            .expect("a valid request");
        let token = self.send(request, false).await;
        String::from_utf8(token.to_vec()).expect("a token")
    }

    /// `POST order` of a form with `token`.
    async fn order(&self, order: &str, token: &str, replayed: bool) {
        let request = Request::post(order)
            .header(&CLIENT, "bench")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("item=book&form_token={token}")))
            .expect("a valid request");
        let item = self.send(request, replayed).await;
        assert_eq!(item, "book");
    }

    /// What a replay case sends first: the request whose response is kept.
    async fn prepare(&mut self, case: &str) -> Option<String> {
        match case {
            "form_replay" => {
                let token = self.page("/memory/form").await;
                self.order("/memory/order_replay", &token, false).await;
                Some(token)
            }
            "idempotency_replay" => {
                let key = self.fresh();
                self.post("/memory/idempotency", "bench", Some(&key), false)
                    .await;
                Some(key)
            }
            "run_once_replay" => {
                let key = self.fresh();
                self.run_once(&key).await;
                Some(key)
            }
            _ => None,
        }
    }

    /// One request of `case` (the table in the module's docs); `kept` is what
    /// [`Self::prepare`] answered.
    async fn request(&mut self, case: &str, kept: Option<&str>) {
        match case {
            "bare" => self.post("/bare", "bench", None, false).await,
            "layered_bare" => self.post("/layered", "bench", None, false).await,
            "avoid_repeat" | "avoid_repeat_layer" | "avoid_repeat_finish" | "lock" => {
                let client = self.fresh();
                self.post(&format!("/memory/{case}"), &client, None, false)
                    .await;
            }
            "form_bare" => {
                let value = self.page("/plain/form").await;
                self.order("/plain/order", &value, false).await;
            }
            "form" | "form_replay_first" => {
                let token = self.page("/memory/form").await;
                let order = if case == "form" {
                    "/memory/order"
                } else {
                    "/memory/order_replay"
                };
                self.order(order, &token, false).await;
            }
            "order_bare" => self.order("/plain/order", PLAIN_TOKEN, false).await,
            "form_replay" => {
                let token = kept.expect("prepared");
                self.order("/memory/order_replay", token, true).await;
            }
            "idempotency" => {
                let key = self.fresh();
                self.post("/memory/idempotency", "bench", Some(&key), false)
                    .await;
            }
            "idempotency_replay" => {
                let key = kept.expect("prepared");
                self.post("/memory/idempotency", "bench", Some(key), true)
                    .await;
            }
            "work_bare" => {
                let key = self.fresh();
                let payload = Charge {
                    order: self.next,
                    cents: 1299,
                };
                std::hint::black_box((key, charge(&payload).await.expect("infallible")));
            }
            "run_once" => {
                let key = self.fresh();
                self.run_once(&key).await;
            }
            "run_once_replay" => self.run_once(kept.expect("prepared")).await,
            _ => unreachable!("checked against CASES"),
        }
    }
}

impl Driver {
    /// One run-once call of the work, with `key`.
    async fn run_once(&self, key: &str) {
        let payload = Charge {
            order: 7,
            cents: 1299,
        };
        let receipt = self
            .once
            .run(key, &payload, |_| charge(&payload))
            .await
            .expect("the work runs, or its result is replayed");
        std::hint::black_box(receipt);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = format!("usage: guard_requests <{}> <n>", CASES.join("|"));
    let case = args.next().filter(|case| CASES.contains(&case.as_str()));
    let n: Option<u64> = args.next().and_then(|n| n.parse().ok());
    let (Some(case), Some(n)) = (case, n) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    #[cfg(feature = "metrics")]
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder");
    // Room for every key of a long run: the store refusing new keys is not what is measured.
    let store = MemoryStore::builder()
        .with_capacity(20_000_000)
        .with_max_bytes(8 << 30)
        .build();
    let mut driver = Driver {
        app: unguarded_routes().merge(guard_cases("/memory", store.clone())),
        once: RunOnce::new(store, "charge"),
        next: 0,
    };
    idem_bench::one_worker_runtime().block_on(async {
        let kept = driver.prepare(&case).await;
        for _ in 0..n {
            driver.request(&case, kept.as_deref()).await;
        }
    });
}
