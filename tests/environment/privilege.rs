//! No privilege through tokentap: a route that injects a credential serves only the clients it
//! admits, the config that would hand a credential to anyone is refused, and the shipped
//! example keeps clients' own keys. Over real sockets: an echo upstream, the proxy, a client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::process::Command;

use support::*;

const INJECTED: &str = "Bearer sk-upstream-master-000";

/// A proxy in front of `up` whose one route injects the master key, with `admit` lines.
async fn injecting(up: &Upstream, admit: &str) -> TestProxy {
    proxy(
        &up.url(),
        &format!("set_headers = {{ authorization = \"{INJECTED}\" }}\n{admit}"),
    )
    .await
}

async fn call(px: &TestProxy, auth: Option<&str>) -> Got {
    let h: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
    send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        &h,
        chat_body("m", false),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injecting_route_serves_only_admitted_keys() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let team = "sk-team-search-123";
    let fp = tokentap::keys::fingerprint(team.as_bytes());
    let px = injecting(&up, &format!("admit_keys = [\"{fp}\"]\n")).await;
    // Not admitted: no key, another key. Refused with a JSON error; nothing reaches upstream.
    for auth in [None, Some("Bearer sk-somebody-else")] {
        let got = call(&px, auth).await;
        assert_eq!(got.status, 403, "{auth:?}");
        let body: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
        assert_eq!(body["error"]["code"], "not_admitted");
    }
    assert!(up.requests().is_empty());
    // Admitted: the route's credential replaces the client's.
    let got = call(&px, Some(&format!("Bearer {team}"))).await;
    assert_eq!(got.status, 200);
    let reqs = up.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("authorization").as_deref(), Some(INJECTED));
    // One record each; refusals are `rejected` 403; no key in the log.
    let recs = px.records(3).await;
    assert_eq!(recs.len(), 3);
    let refused = recs.iter().filter(|r| r.status == 403).count();
    assert_eq!(refused, 2);
    assert!(recs
        .iter()
        .filter(|r| r.status == 403)
        .all(|r| r.outcome == tokentap::meter::Outcome::Rejected));
    let log = std::fs::read_to_string(&px.log).unwrap();
    for secret in [team, "sk-somebody-else", "sk-upstream-master-000"] {
        assert!(!log.contains(secret), "{secret} written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_admit_by_network() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let inside = injecting(&up, "admit_sources = [\"127.0.0.0/8\"]\n").await;
    assert_eq!(call(&inside, None).await.status, 200);
    let outside = injecting(&up, "admit_sources = [\"10.0.0.0/8\"]\n").await;
    assert_eq!(call(&outside, None).await.status, 403);
    assert_eq!(up.requests().len(), 1);
}

/// The example config as shipped, with both upstream keys in the environment: a client with no
/// key reaches the upstream with no credential, and one with a key reaches it with its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_example_keeps_clients_keys() {
    std::env::set_var("VLLM_API_KEY", "sk-vllm-engine-key");
    std::env::set_var("LITELLM_MASTER_KEY", "sk-litellm-master-key");
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokentap.toml"))
            .unwrap()
            .replace("http://127.0.0.1:8000", &up.url())
            .replace("http://127.0.0.1:4000", &up.url());
    let px = proxy_toml(&text).await;
    for path in ["/v1/chat/completions", "/gateway/v1/chat/completions"] {
        for auth in [None, Some("Bearer sk-client-own")] {
            let h: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
            let got = send(&client(), "POST", &px.url(path), &h, chat_body("m", false))
                .await
                .unwrap();
            assert_eq!(got.status, 200);
            let last = up.requests().pop().unwrap();
            assert_eq!(last.header("authorization").as_deref(), auth, "{path}");
        }
    }
    for r in up.requests() {
        let head = r.head.to_ascii_lowercase();
        assert!(!head.contains("sk-vllm-engine-key") && !head.contains("sk-litellm-master-key"));
    }
}

fn check(toml: &str) -> (i32, String) {
    let dir = scratch("privilege-check");
    let f = dir.join("t.toml");
    std::fs::write(&f, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["check", "--config"])
        .arg(&f)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_refuses_a_credential_for_anyone_and_names_the_ways_out() {
    let route = "[[routes]]\nname = \"gw\"\nupstream = \"http://127.0.0.1:4000\"\n";
    let (code, err) = check(&format!(
        "{route}set_headers = {{ authorization = \"Bearer sk-x\" }}\n"
    ));
    assert_eq!(code, 64);
    for part in [
        "routes[0].set_headers.authorization",
        "\"gw\"",
        "admit_keys",
        "admit_sources",
        "inject_without_admission",
    ] {
        assert!(err.contains(part), "{part}: {err}");
    }
    assert!(!err.contains("sk-x"), "the credential echoed: {err}");
    // Any credential header counts, and the ones the config names as secret.
    let (code, err) = check(&format!(
        "[keys]\nsecret_headers = [\"X-Goog-Api-Key\"]\n{route}set_headers = {{ x-goog-api-key = \"k\" }}\n"
    ));
    assert_eq!(code, 64, "{err}");
    assert_eq!(
        check(&format!("{route}set_headers = {{ api-key = \"k\" }}\n")).0,
        64
    );
    // A header that carries no credential needs no admission.
    assert_eq!(
        check(&format!("{route}set_headers = {{ x-team = \"search\" }}\n")).0,
        0
    );
    // The sidecar's opt-out: only on a loopback listener.
    let opt = format!(
        "{route}set_headers = {{ authorization = \"Bearer sk-x\" }}\ninject_without_admission = true\n"
    );
    let (code, err) = check(&format!("[listen]\naddr = \"0.0.0.0:8080\"\n{opt}"));
    assert_eq!(code, 64);
    assert!(err.contains("routes[0].inject_without_admission"), "{err}");
    assert_eq!(
        check(&format!("[listen]\naddr = \"127.0.0.1:8080\"\n{opt}")).0,
        0
    );
    // Aliases are admitted by name; an unknown one is refused.
    let fp = tokentap::keys::fingerprint(b"sk-team");
    let aliased = format!("[keys.aliases]\n\"{fp}\" = \"team\"\n{route}set_headers = {{ authorization = \"Bearer sk-x\" }}\n");
    assert_eq!(check(&format!("{aliased}admit_keys = [\"team\"]\n")).0, 0);
    let (code, err) = check(&format!("{aliased}admit_keys = [\"nobody\"]\n"));
    assert_eq!(code, 64);
    assert!(err.contains("routes[0].admit_keys[0]"), "{err}");
}
