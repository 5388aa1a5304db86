//! The pages: products and a session for every browser, no form for an unknown product.

use axum::http::{StatusCode, header};
use idem_tests::{Backend, answer};

use crate::{
    TestShop, form_post, form_token, get, new_browser, order_form, status, support, token_in,
};

idem_tests::on_every_store!(
    pages_show_products_and_hand_out_a_session,
    an_unknown_product_has_no_form_and_costs_no_token,
);

async fn pages_show_products_and_hand_out_a_session<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    let front = answer(&shop.router, get("/", None)).await;
    assert_eq!(front.status, StatusCode::OK);
    assert!(front.text().contains("Hand grinder"), "{}", front.text());
    let cookie = front.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("shop_session="), "{cookie}");
    for setting in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age=86400"] {
        assert!(cookie.contains(setting), "{setting}: {cookie}");
    }
    let s1 = support::session_cookie(&front);

    // A browser that has its session gets no new one: the same session, its day renewed.
    let again = answer(&shop.router, get("/", Some(&s1))).await;
    assert_eq!(support::session_cookie(&again), s1);
    // A session id the shop never gave out is not taken: the browser gets a new one, and
    // the form that page shows is the new session's.
    let malformed = answer(&shop.router, get("/", Some("shop_session=s1"))).await;
    assert_ne!(support::session_cookie(&malformed), "shop_session=s1");
    let unknown = "shop_session=AAAAAAAAAAAAAAAAAAAAAA";
    let form = answer(&shop.router, get("/orders/new?product_id=1", Some(unknown))).await;
    let renewed = support::session_cookie(&form);
    assert_ne!(renewed, unknown);
    let token = token_in(&form.text());
    let placed = answer(&shop.router, form_post(&renewed, &order_form(&token))).await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER, "{}", placed.text());

    // The first page a browser opens is the order form: its token is that new session's.
    let form = answer(&shop.router, get("/orders/new?product_id=1", None)).await;
    assert_eq!(form.status, StatusCode::OK);
    let session = support::session_cookie(&form);
    assert_ne!(session, s1);
    let token = token_in(&form.text());
    let placed = answer(&shop.router, form_post(&session, &order_form(&token))).await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER, "{}", placed.text());

    let missing = answer(&shop.router, get("/orders/new?product_id=99", Some(&s1))).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let bad = answer(&shop.router, get("/orders/new?product_id=x", Some(&s1))).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        status(&shop.router, get("/orders/99", Some(&s1))).await,
        StatusCode::NOT_FOUND
    );
}

async fn an_unknown_product_has_no_form_and_costs_no_token<B: Backend>() {
    let shop = TestShop::<B>::start().await;
    // The form's tokens are rows of the shop's database, beside the orders they place.
    let tokens = || async {
        let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM idem_tokens")
            .fetch_one(&shop.db)
            .await
            .expect("the tokens' count");
        count
    };
    let s1 = new_browser(&shop.router).await;
    for uri in ["/orders/new?product_id=99", "/orders/new?product_id=-1"] {
        let missing = answer(&shop.router, get(uri, Some(&s1))).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND, "{uri}");
        assert!(!missing.text().contains("form_token"), "{uri}");
    }
    let bad = answer(&shop.router, get("/orders/new?product_id=x", Some(&s1))).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    // A browser without a session yet gets none stored either.
    let fresh = answer(&shop.router, get("/orders/new?product_id=99", None)).await;
    assert_eq!(fresh.status, StatusCode::NOT_FOUND);
    assert_eq!(tokens().await, 0);

    // The count does see a token: a product's form stores one.
    form_token(&shop.router, &s1).await;
    assert_eq!(tokens().await, 1);
}
