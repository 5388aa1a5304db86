//! The order form in a real browser: Debian's `chromium`, driven through
//! `chromedriver` (WebDriver) with `fantoccini`. Double-click "Place order": the browser
//! ends on the order's own page. Open a
//! fresh form and order again at once: the shop's refusal page, in its own look (saved as
//! a screenshot under Cargo's per-test temporary directory,
//! `target/tmp/webshop-browser/refused-duplicate.png`, its Chinese message drawn with the
//! CJK font `scripts/test.sh` installs). Reload the order page: exactly one order exists.
//!
//! A missing `chromedriver` fails the test with a message that says how to install it,
//! never a skip; `scripts/test.sh` installs it where it can. `IDEM_CHROMEDRIVER` names a
//! binary that is not on `PATH`.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use example_webshop::Shop;
use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, ClientBuilder, Locator};
use idem_axum::MemoryStore;
use idem_tests::unused_port;
use sqlx::SqlitePool;

/// What the shop's refusals say (its form-token and window messages).
const REFUSED: &str = "请勿重复提交";

/// A `chromedriver` of this test's own, killed when dropped.
struct ChromeDriver {
    child: Child,
    port: u16,
}

impl ChromeDriver {
    fn start() -> Self {
        let binary = std::env::var("IDEM_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let port = unused_port();
        let child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run {binary:?} ({error}): install Debian's chromium and \
                     chromium-driver (`apt-get install chromium chromium-driver`; \
                     `bash scripts/test.sh` does it), or set IDEM_CHROMEDRIVER"
                )
            });
        let driver = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }

    async fn browser(&self) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1024,768"]
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a chromium session")
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clicks `element` `times` times in a row, as fast as a user's double or triple click.
async fn click(browser: &Client, element: fantoccini::elements::Element, times: usize) {
    let mut mouse = MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
        element,
        duration: None,
        x: 0.0,
        y: 0.0,
    });
    for _ in 0..times {
        mouse = mouse
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            });
    }
    browser.perform_actions(mouse).await.expect("the clicks");
}

/// Opens a fresh order form for product 1 and clicks its "Place order" button `clicks`
/// times.
async fn order_on_a_fresh_form(browser: &Client, base: &str, clicks: usize) {
    browser
        .goto(&format!("{base}/orders/new?product_id=1"))
        .await
        .expect("an order form");
    let submit = browser
        .find(Locator::Id("submit"))
        .await
        .expect("the button");
    click(browser, submit, clicks).await;
}

/// Waits until the page shows `text`, and returns its source.
async fn page_with(browser: &Client, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let source = browser.source().await;
        if let Ok(source) = &source
            && source.contains(text)
        {
            return source.clone();
        }
        if Instant::now() >= deadline {
            let url = browser.current_url().await;
            panic!("no page with {text:?} came; the browser is at {url:?}, showing {source:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every order, once the requests in flight have landed: the count must stay put.
async fn settled_orders(db: &SqlitePool) -> i64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(db)
        .await
        .expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_click_lands_on_its_order_and_a_refusal_is_the_shops_own_page() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = example_webshop::connect(&format!(
        "sqlite://{}",
        dir.path().join("shop.db").display()
    ))
    .await
    .expect("the database");
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("a port");
    let base = format!("http://{}", listener.local_addr().expect("an address"));
    let router = Shop::new(db.clone(), MemoryStore::new()).router();
    tokio::spawn(async move { axum::serve(listener, router).await });

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;

    // Double-click "Place order": the second click's answer is the first one's, replayed,
    // so the browser ends on the order's own page.
    order_on_a_fresh_form(&browser, &base, 2).await;
    page_with(&browser, r#"id="order-placed""#).await;
    let url = browser.current_url().await.expect("a URL");
    assert_eq!(
        url.path(),
        "/orders/1",
        "the double click ends on the order"
    );
    assert_eq!(settled_orders(&db).await, 1);

    // A fresh form at once: a second order from this browser inside the shop's 5 s
    // window is refused, on the shop's own page, with its way back.
    order_on_a_fresh_form(&browser, &base, 1).await;
    let refused = page_with(&browser, REFUSED).await;
    assert!(
        refused.contains(r#"id="refused""#),
        "the shop's page: {refused}"
    );
    assert!(refused.contains("Back to the shop"), "{refused}");
    let screenshot = browser.screenshot().await.expect("a screenshot");
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("webshop-browser");
    std::fs::create_dir_all(&artifacts).expect("the artifact directory");
    std::fs::write(artifacts.join("refused-duplicate.png"), screenshot).expect("the screenshot");
    assert_eq!(settled_orders(&db).await, 1);

    // Reload the order's page: a GET, nothing is ordered again.
    browser
        .goto(&format!("{base}/orders/1"))
        .await
        .expect("the order page");
    for _ in 0..2 {
        browser.refresh().await.expect("a reload");
        page_with(&browser, "Order 1").await;
    }
    assert_eq!(settled_orders(&db).await, 1);

    browser.close().await.expect("the session closes");
}
