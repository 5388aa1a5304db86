//! Orders placed through the form: once however often it is posted, once for a double
//! click, one form per browser inside the window, nothing without a token or a session.

use axum::http::{StatusCode, header};
use idem_tests::{Backend, answer};

use crate::{
    TestShop, form_post, form_token, get, new_browser, order_form, order_with, status,
    twenty_clicks,
};

idem_tests::on_every_store!(
    a_form_places_one_order_however_often_it_is_posted,
    a_double_click_places_one_order,
    a_second_form_inside_the_window_is_refused_for_that_browser_only,
    form_posts_without_token_or_session_are_refused_and_place_nothing,
);

async fn a_form_places_one_order_however_often_it_is_posted<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let s2 = new_browser(&shop.router).await;
    let token = form_token(&shop.router, &s1).await;
    let placed = answer(&shop.router, form_post(&s1, &order_form(&token))).await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER, "{}", placed.text());
    assert_eq!(placed.headers[header::LOCATION], "/orders/1");

    // Back and submit again, or the browser's re-POST: the token is spent, and the
    // repeat lands on the order its first post placed.
    for _ in 0..3 {
        let repeat = answer(&shop.router, form_post(&s1, &order_form(&token))).await;
        assert_eq!(repeat.status, StatusCode::SEE_OTHER);
        assert_eq!(repeat.headers[header::LOCATION], "/orders/1");
        assert_eq!(repeat.headers["idempotent-replayed"], "true");
    }
    // The same form from another browser is refused, in the shop's own page.
    let stolen = answer(&shop.router, form_post(&s2, &order_form(&token))).await;
    assert_eq!(stolen.status, StatusCode::CONFLICT);
    assert!(stolen.text().contains("请勿重复提交"), "{}", stolen.text());
    assert!(
        stolen
            .text()
            .contains(r#"<a href="/">Back to the shop</a>"#),
        "the shop's own page, with a way back: {}",
        stolen.text()
    );
    // The page the redirect leads to; reloading it is a GET and places nothing.
    for _ in 0..2 {
        let page = answer(&shop.router, get("/orders/1", Some(&s1))).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.text().contains("Order 1"));
    }
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
    let orders = answer(&shop.router, get("/api/orders", None)).await.json();
    assert_eq!(orders[0]["product_id"], 1);
    assert_eq!(orders[0]["quantity"], 2);
    assert!(
        orders[0]["client"]
            .as_str()
            .unwrap()
            .starts_with("browser:")
    );
}

async fn a_double_click_places_one_order<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let token = form_token(&shop.router, &s1).await;
    let statuses = twenty_clicks(std::slice::from_ref(&shop.router), &s1, &token).await;
    // Every click lands on the one order the first placed.
    assert!(
        statuses.iter().all(|s| *s == StatusCode::SEE_OTHER),
        "{statuses:?}"
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 1);
}

async fn a_second_form_inside_the_window_is_refused_for_that_browser_only<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let s2 = new_browser(&shop.router).await;
    let first = form_token(&shop.router, &s1).await;
    let second = form_token(&shop.router, &s1).await;
    let other = form_token(&shop.router, &s2).await;
    assert_eq!(
        order_with(&shop.router, &s1, &first).await,
        StatusCode::SEE_OTHER
    );
    // A fresh token, but the same browser inside the route's anti-repeat window.
    assert_eq!(
        order_with(&shop.router, &s1, &second).await,
        StatusCode::CONFLICT
    );
    // Another browser is not blocked, and one browser cannot spend another's token.
    assert_eq!(
        order_with(&shop.router, &s1, &other).await,
        StatusCode::CONFLICT
    );
    assert_eq!(
        order_with(&shop.router, &s2, &other).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 2);
}

async fn form_posts_without_token_or_session_are_refused_and_place_nothing<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let s1 = new_browser(&shop.router).await;
    let no_token = answer(&shop.router, form_post(&s1, "product_id=1&quantity=1")).await;
    assert_eq!(no_token.status, StatusCode::BAD_REQUEST);
    let forged = answer(&shop.router, form_post(&s1, &order_form("forged"))).await;
    assert_eq!(forged.status, StatusCode::CONFLICT);
    // The browser's own token, posted without its session cookie: the post is a new
    // session's, and the token is not that session's.
    let token = form_token(&shop.router, &s1).await;
    let mut no_session = form_post(&s1, &order_form(&token));
    no_session.headers_mut().remove(header::COOKIE);
    assert_eq!(status(&shop.router, no_session).await, StatusCode::CONFLICT);
    let token = form_token(&shop.router, &s1).await;
    let bad_quantity = answer(
        &shop.router,
        form_post(&s1, &format!("product_id=1&quantity=0&form_token={token}")),
    )
    .await;
    assert_eq!(bad_quantity.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(shop.count("SELECT COUNT(*) FROM orders").await, 0);
}
