//! The reference web client across a crash: a real `weft serve` is `kill -9`ed mid-turn and
//! started again on the same address and database; the page shows "reconnecting…", resumes
//! the turn, and continues the same answer and the same cards (headless Chromium).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../weft-server/tests/support/browser.rs"]
mod chromium;
mod support;

use chromium::{Browser, ANSWER, ONE_BROWSER};
use serde_json::json;
use support::{Db, Server, NO_USER_LIMITS};

#[tokio::test]
async fn the_page_goes_on_with_a_turn_its_restarted_server_took_up() {
    let _one = ONE_BROWSER.lock().await;
    let db = Db::new(false).await;
    // A read, then a slow second round: the turn is mid-way when its server dies.
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["first part. "], "tool_calls": [{"name": "memory_list", "arguments": {}}]},
        {"delay_ms": 2_500, "text": "second part."}]}]});
    let config = format!("{NO_USER_LIMITS}[cluster]\nreplica_id = \"one\"\n");
    let server = Server::start_with(&db, &script, &config).await;
    let addr = server.addr.clone();
    let b = Browser::start().await;
    b.open(&format!("http://{addr}/")).await;
    b.say("go").await;
    let cards = "Array.from(document.querySelectorAll('.tool-card')).map(c => [c.dataset.name, c.dataset.status].join('|'))";
    b.wait(&format!("{cards}.join() === 'memory_list|done'"))
        .await;
    b.wait(&format!("{ANSWER} === 'first part.'")).await;

    server.kill().await;
    b.wait("document.getElementById('connection').textContent === 'reconnecting…'")
        .await;
    let server = Server::start_on(&db, &script, &config, &addr).await;
    b.wait(&format!("{ANSWER} === 'first part. second part.'"))
        .await;
    b.wait("!window.weft.state.running").await;
    assert_eq!(
        b.js(cards).await,
        json!(["memory_list|done"]),
        "the same card, once"
    );
    assert_eq!(
        b.js("document.querySelectorAll('.message.assistant').length")
            .await,
        json!(1),
        "one answer, no ghost"
    );
    b.shot("resumed-after-crash").await;
    b.close().await;
    server.stop().await;
}
