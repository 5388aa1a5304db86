//! Over a real socket and on Redis: one post spends a GET's token, Redis holds no raw
//! token and one command does each step, an outage follows the store-failure policy.

use std::time::Duration;

use axum::http::{Request, StatusCode, header};
use idem_axum::Idem;
use idem_axum::identity::ClientCookie;
use idem_tests::{Backend, Shop, shop_on};

use crate::{accepted, app, issue, order, post_form, routes, send_empty_as, token_in};

idem_tests::on_every_store!(over_tcp_a_get_issues_and_one_post_spends);

async fn over_tcp_a_get_issues_and_one_post_spends<B: Backend>() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (_backend, shop, app) = shop_on::<B>(app).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // One HTTP/1.1 exchange on a connection of its own: (status, head, body).
    let exchange = |request: String| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_owned(), body.to_owned())
    };
    let cookie = "Cookie: session=s3ss10n-alice\r\n";

    let (status, _, page) = exchange(format!(
        "GET /form HTTP/1.1\r\nHost: shop\r\n{cookie}Connection: close\r\n\r\n"
    ))
    .await;
    assert_eq!(status, 200);
    let token = token_in(&page, "form_token");
    let post = |body: String| {
        format!(
            "POST /orders HTTP/1.1\r\nHost: shop\r\n{cookie}\
             Content-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let (status, _, body) = exchange(post(order(&token))).await;
    assert_eq!(status, 201);
    assert_eq!(body, "ordered tea cup");
    let (status, head, body) = exchange(post(order(&token))).await;
    assert_eq!(status, 409, "the second post of the page is refused");
    assert!(head.contains("application/problem+json"), "{head}");
    assert!(body.contains("invalid-form-token"), "{body}");
    server.abort();
    assert_eq!(shop.runs(), 1);
}

/// The store keeps a hash of the token, never the token: a dump of Redis gives nothing
/// to post. One script (one round trip) per issued token, one per verified one, and with
/// rotation one of each.
#[tokio::test]
async fn redis_holds_no_raw_token_and_one_command_does_each_step() {
    let server = idem_tests::RedisServer::start();
    let shop = Shop::default();
    let app = app(server.store(), &shop);
    // Opens the store's connection and loads both scripts.
    let warm_up = issue(&app, "warm-up").await;
    accepted(&app, "/orders", "warm-up", &warm_up, "warm-up").await;

    let evalsha = |calls: &std::collections::BTreeMap<String, u64>| {
        let scripted = [
            "evalsha",
            "time",
            "zrangebyscore",
            "zadd",
            "zcard",
            "pttl",
            "pexpire",
            "zscore",
            "zrem",
        ];
        let outside: Vec<_> = calls
            .keys()
            .filter(|name| !scripted.contains(&name.as_str()))
            .collect();
        assert!(
            outside.is_empty(),
            "commands outside the scripts: {outside:?}"
        );
        calls.get("evalsha").copied().unwrap_or_default()
    };
    let before = server.command_calls();
    let mut tokens = Vec::new();
    for client in ["alice", "bob", "carol"] {
        tokens.push((client, issue(&app, client).await));
    }
    assert_eq!(
        evalsha(&server.command_calls_since(&before)),
        3,
        "one script per issued token"
    );
    let keys = server.keys();
    assert_eq!(
        keys.iter().filter(|key| key.contains(":scope:")).count(),
        3,
        "one set per client holding tokens: {keys:?}"
    );
    for key in &keys {
        let members: Vec<String> = server.query(&["ZRANGE", key, "0", "-1"]);
        for (_, token) in &tokens {
            assert!(!key.contains(token.as_str()), "{key} holds a token");
            assert!(
                members
                    .iter()
                    .all(|member| !member.contains(token.as_str())),
                "{key}'s members hold a token"
            );
        }
    }

    let before = server.command_calls();
    for (client, token) in &tokens {
        let response = post_form(&app, "/orders", client, order(token)).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    assert_eq!(
        evalsha(&server.command_calls_since(&before)),
        3,
        "one script per verified token"
    );

    let token = issue(&app, "alice").await;
    let before = server.command_calls();
    let response = post_form(&app, "/editing", "alice", order(&token)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        evalsha(&server.command_calls_since(&before)),
        2,
        "rotation: the script that spends, the one that issues"
    );
}

#[tokio::test]
async fn a_store_outage_follows_the_policy_without_hanging() {
    let down = || idem_tests::unreachable_redis_store(Duration::from_millis(200));
    let shop = Shop::default();
    let closed = app(down(), &shop);
    let started = std::time::Instant::now();
    let page = send_empty_as(&closed, Request::get("/form"), "alice").await;
    assert_eq!(page.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(page.headers()[header::RETRY_AFTER], "1");
    let post = post_form(&closed, "/orders", "alice", order("AAAAAAAAAAAAAAAAAAAAAA")).await;
    assert_eq!(post.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "each bounded by the store timeout"
    );
    assert_eq!(shop.runs(), 0);

    let open = routes(&shop).layer(
        Idem::builder()
            .with_store(down())
            .with_client_identity(ClientCookie::new("session"))
            .with_store_failure(idem_axum::StoreFailure::FailOpen)
            .build()
            .layer(),
    );
    let token = issue(&open, "alice").await;
    assert_eq!(token.len(), 22, "the page still renders, with a token");
    let post = post_form(&open, "/orders", "alice", order(&token)).await;
    assert_eq!(post.status(), StatusCode::CREATED, "let through unverified");
    assert_eq!(shop.runs(), 1);
}
