//! The hostile-input corpus (`hostile_input/cases.rs`) cases the gateway refuses itself, and a
//! wrong method: each gets its exact status and the OpenAI error shape, never a 5xx.

use super::{gateway, get, post, send};
use crate::hostile_input::cases::{self, check_answer};

#[tokio::test]
async fn corpus_gets_exact_statuses_and_openai_errors() {
    let app = gateway(&[]);
    let cases = cases::all();
    assert!(cases.len() >= 50, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases.into_iter().filter(|c| !c.worker_answers) {
        let answer = send(&app, post(case.path, case.content_type, case.body)).await;
        if let Some(p) = check_answer(case.expect, answer.status, &answer.body) {
            failures.push(format!("{}: {p}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    super::assert_still_serving(&app).await;
}

#[tokio::test]
async fn wrong_method_is_an_openai_405() {
    let app = gateway(&[]);
    let answer = send(&app, get("/v1/chat/completions")).await;
    assert_eq!(check_answer(405, answer.status, &answer.body), None);
}
