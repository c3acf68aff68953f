//! Compilation is bounded: a component over a static limit is refused
//! before compiling, a compile past the memory or time cap of the compile
//! process is stopped, and a refusal is remembered across restarts while
//! the last good version serves.

use std::time::{Duration, Instant};

use policyhost::fair::Teams;
use policyhost::policies::configmap::{self, Compression};
use policyhost::policies::refusal;
use policyhost::publisher::publish;
use policyhost::runtime::{
    CompileBudget, CompileConfig, CompileLimit, CompileProcess, Error, Footprint, PolicySpec,
    Refusal, Runtime, RuntimeConfig, Source, compile::Measure,
};

use crate::common::cluster::{Env, OperatorSetup, eventually};
use crate::common::{self, for_every_namespace, guest_bytes, leb128, policyhost_bin, variants};
use policyhost::vocabulary::COMPILE_REFUSED_ANNOTATION;

fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    leb128(body.len(), out);
    out.extend_from_slice(body);
}

/// A component holding one core module with one function of about
/// `body_bytes` bytes: `local.get 0; local.get 0; i32.add; local.set 0`
/// over and over. It gzips to a few KiB and asks Cranelift for an SSA value
/// per instruction in a single function: hundreds of MiB and seconds of
/// compile per MiB of body.
fn compile_bomb(body_bytes: usize) -> Vec<u8> {
    compile_bombs(1, body_bytes)
}

/// Like [`compile_bomb`], with `functions` such functions (wasmparser
/// takes no function body over about 7 MiB; more functions make a longer
/// compile).
fn compile_bombs(functions: usize, body_bytes: usize) -> Vec<u8> {
    const STEP: [u8; 7] = [0x20, 0x00, 0x20, 0x00, 0x6a, 0x21, 0x00];
    let mut code = vec![0x01, 0x01, 0x7f]; // one local declaration: 1 × i32
    for _ in 0..body_bytes / STEP.len() {
        code.extend_from_slice(&STEP);
    }
    code.push(0x0b); // end
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[0x01, 0x60, 0x00, 0x00], &mut module); // type: [] -> []
    let mut declared = Vec::new();
    leb128(functions, &mut declared);
    declared.extend(std::iter::repeat_n(0x00, functions)); // each of type 0
    section(3, &declared, &mut module);
    let mut bodies = Vec::new();
    leb128(functions, &mut bodies);
    for _ in 0..functions {
        leb128(code.len(), &mut bodies);
        bodies.extend_from_slice(&code);
    }
    section(10, &bodies, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component); // a core module section
    component
}

fn runtime_with(compile: CompileConfig) -> Runtime {
    Runtime::new(RuntimeConfig {
        threads: 2,
        compile,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

/// The built `policyhost` binary as the compile process, with these caps.
fn capped(memory_bytes: u64, timeout: Duration) -> CompileProcess {
    CompileProcess {
        program: policyhost_bin(),
        ..CompileProcess::policyhost(memory_bytes, timeout)
    }
}

fn refusal_of(error: Error) -> Refusal {
    match error {
        Error::CompileLimitExceeded(refusal) => refusal,
        other => panic!("expected CompileLimitExceeded, got {other:?}"),
    }
}

#[test]
fn a_tiny_gzipped_component_that_asks_for_a_huge_compile_is_refused_before_compiling() {
    let bomb = compile_bomb(4 << 20);
    let map = configmap::build(
        "bomb",
        "ns",
        &bomb,
        &for_every_namespace(),
        Compression::Always,
    )
    .expect("a ConfigMap");
    let shipped = map
        .binary_data
        .as_ref()
        .and_then(|b| b.get(configmap::MODULE_GZ_KEY))
        .map_or(0, |b| b.0.len());
    assert!(shipped < 32 << 10, "{shipped} bytes gzip'd");
    let runtime = common::runtime();
    let started = Instant::now();
    let error = runtime
        .load(PolicySpec::new("bomb"), &bomb)
        .expect_err("refused");
    let took = started.elapsed();
    assert_eq!(error.reason(), "CompileLimitExceeded");
    let text = error.to_string();
    assert!(
        text.starts_with(
            "policy is too expensive to compile: function body 1 of core module 1 has "
        ) && text.ends_with(&format!(
            " bytes of code in one function, the limit is {}",
            Footprint::LIMITS.function_bytes
        )),
        "{text}"
    );
    let refusal = refusal_of(error);
    assert!(
        matches!(&refusal.limit, CompileLimit::Static(over) if over.measure == Measure::FunctionBytes),
        "{refusal:?}"
    );
    assert_eq!(runtime.cache_stats().compiles, 0, "nothing was compiled");
    assert!(
        took < Duration::from_secs(1),
        "the static check took {took:?}"
    );

    // The same bytes again: recalled, not measured again.
    let again = refusal_of(
        runtime
            .load(PolicySpec::new("bomb"), &bomb)
            .expect_err("refused"),
    );
    assert!(again.remembered);
    assert!(again.to_string().ends_with("not compiled again)"));
}

#[test]
fn every_example_policy_is_far_below_every_static_limit() {
    let limits = Footprint::LIMITS.figures();
    for name in common::policy_crates() {
        let bytes = guest_bytes(&name);
        let started = Instant::now();
        let footprint = Footprint::of(&bytes).expect("it parses");
        let took = started.elapsed();
        eprintln!("{name}: {footprint:?} in {took:?}");
        // What the check adds to a first compile (about 150 ms for fanout).
        assert!(took < Duration::from_millis(20), "{name}: {took:?}");
        for ((measure, figure), (_, limit)) in footprint.figures().into_iter().zip(limits) {
            // Nesting is a small count in any component: a quarter of it.
            let margin = if measure == Measure::Nesting { 4 } else { 10 };
            assert!(
                figure <= limit / margin,
                "{name}: {figure} {measure}, the limit is {limit}"
            );
        }
    }
}

#[test]
fn fanout_compiled_in_a_capped_child_process_runs_as_if_compiled_here() {
    let runtime = runtime_with(CompileConfig {
        process: Some(capped(
            policyhost::runtime::compile::DEFAULT_MEMORY_BYTES,
            Duration::from_secs(60),
        )),
        ..CompileConfig::default()
    });
    let bytes = guest_bytes("fanout");
    let started = Instant::now();
    let policy = runtime
        .load(PolicySpec::new("fanout"), &bytes)
        .expect("compiled in the child process");
    let compile = started.elapsed();
    assert_eq!(policy.source(), Source::Compiled);
    let started = Instant::now();
    let hit = runtime
        .load(PolicySpec::new("fanout"), &bytes)
        .expect("cache hit");
    let hit_took = started.elapsed();
    assert_eq!(hit.source(), Source::Memory);
    let reconciled = runtime
        .reconcile_blocking(&policy, &policyhost::runtime::reference::fanout(3))
        .result
        .expect("reconcile");
    assert_eq!(reconciled.children.len(), 3);
    eprintln!("compile in a child process {compile:?}, cache hit {hit_took:?}");
    assert!(hit_took < Duration::from_millis(50), "{hit_took:?}");
}

#[test]
fn a_compile_past_its_time_cap_is_killed_and_refused() {
    let runtime = runtime_with(CompileConfig {
        process: Some(capped(256 << 20, Duration::from_millis(1))),
        ..CompileConfig::default()
    });
    let bytes = guest_bytes("fanout");
    let started = Instant::now();
    let refusal = refusal_of(
        runtime
            .load(PolicySpec::new("fanout"), &bytes)
            .expect_err("killed at its time cap"),
    );
    let took = started.elapsed();
    assert_eq!(refusal.limit, CompileLimit::Time { limit_ms: 1 });
    assert_eq!(refusal.to_string(), "compiling it takes longer than 1 ms");
    assert!(took < Duration::from_secs(2), "killed after {took:?}");
}

#[test]
fn a_compile_past_its_memory_cap_is_stopped_and_refused() {
    // Within the static limits once they are raised: only the cap stops it.
    let bomb = compile_bomb(4 << 20);
    let runtime = runtime_with(CompileConfig {
        limits: Footprint {
            function_bytes: u64::MAX,
            code_bytes: u64::MAX,
            ..Footprint::LIMITS
        },
        process: Some(capped(160 << 20, Duration::from_secs(120))),
        budget: None,
    });
    let started = Instant::now();
    let refusal = refusal_of(
        runtime
            .load(PolicySpec::new("bomb"), &bomb)
            .expect_err("stopped at its memory cap"),
    );
    eprintln!("stopped after {:?}", started.elapsed());
    assert_eq!(refusal.limit, CompileLimit::Memory { limit: 160 << 20 });
}

/// The default memory cap is sized for an interpreter's component: the
/// Python and TypeScript `fanout` (CPython, QuickJS) compile in the
/// capped child process. The time cap here is generous: this is a debug
/// binary, several times slower than the release one the default is for.
#[test]
fn python_and_typescript_components_compile_under_the_default_memory_cap() {
    let runtime = runtime_with(CompileConfig {
        process: Some(capped(
            policyhost::runtime::compile::DEFAULT_MEMORY_BYTES,
            Duration::from_secs(300),
        )),
        ..CompileConfig::default()
    });
    for language in ["python", "typescript"] {
        let bytes = std::fs::read(crate::common::polyglot(language, "fanout")).expect("read");
        let started = Instant::now();
        let policy = runtime
            .load(PolicySpec::new("fanout"), &bytes)
            .unwrap_or_else(|e| panic!("{language}: {e}"));
        assert_eq!(policy.source(), Source::Compiled, "{language}");
        eprintln!("{language}: compiled in {:?}", started.elapsed());
    }
}

#[test]
fn compiled_code_larger_than_the_host_takes_back_is_refused() {
    let runtime = runtime_with(CompileConfig {
        process: Some(CompileProcess {
            max_artifact_bytes: 64 << 10,
            ..capped(
                policyhost::runtime::compile::DEFAULT_MEMORY_BYTES,
                Duration::from_secs(60),
            )
        }),
        ..CompileConfig::default()
    });
    let refusal = refusal_of(
        runtime
            .load(PolicySpec::new("fanout"), &guest_bytes("fanout"))
            .expect_err("its compiled code is about 1 MB"),
    );
    assert_eq!(refusal.limit, CompileLimit::Artifact { limit: 64 << 10 });
}

#[test]
fn a_refusal_recorded_by_a_previous_run_is_recalled_without_compiling() {
    let bytes = guest_bytes("fanout");
    // A refusal of these very bytes, recorded under this host's limits by
    // an earlier run (a time cap, which a later, idle run might not hit).
    let first = runtime_with(CompileConfig {
        process: Some(capped(256 << 20, Duration::from_millis(1))),
        ..CompileConfig::default()
    });
    let recorded = refusal_of(
        first
            .load(PolicySpec::new("fanout"), &bytes)
            .expect_err("refused"),
    );
    let same_limits = || CompileConfig {
        process: Some(capped(256 << 20, Duration::from_millis(1))),
        ..CompileConfig::default()
    };
    let restarted = runtime_with(same_limits());
    let recalled = refusal_of(
        restarted
            .load(
                PolicySpec::new("fanout").remembered(Some(recorded.clone())),
                &bytes,
            )
            .expect_err("recalled"),
    );
    assert!(recalled.remembered);
    assert_eq!(recalled.limit, recorded.limit);
    assert_eq!(restarted.cache_stats().compiles, 0);

    // Other limits: the recorded refusal does not apply, it compiles.
    let raised = common::runtime();
    let policy = raised
        .load(PolicySpec::new("fanout").remembered(Some(recorded)), &bytes)
        .expect("compiled under other limits");
    assert_eq!(policy.source(), Source::Compiled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_too_expensive_to_compile_is_rejected_while_the_last_good_serves_and_a_restart_does_not_compile_it()
 {
    let mut env = Env::start_with(OperatorSetup::configmaps()).await;
    let good = guest_bytes("fanout");
    let good_digest = policyhost::runtime::Digest::of(&good).to_hex();
    let map = configmap::build(
        "fanout",
        &env.policy_namespace,
        &good,
        &for_every_namespace(),
        Compression::Auto,
    )
    .expect("a policy ConfigMap");
    publish::apply(&env.client, &map).await.expect("apply");
    let verdict = publish::wait_observed(&env.client, &map, Duration::from_secs(60))
        .await
        .expect("verdict");
    assert_eq!(verdict.error, None);

    let bomb = compile_bomb(4 << 20);
    let bomb_map = configmap::build(
        "fanout",
        &env.policy_namespace,
        &bomb,
        &for_every_namespace(),
        Compression::Always,
    )
    .expect("a few KiB gzip'd");
    publish::apply(&env.client, &bomb_map).await.expect("apply");
    let verdict = publish::wait_observed(&env.client, &bomb_map, Duration::from_secs(60))
        .await
        .expect("verdict");
    let error = verdict.error.unwrap_or_default();
    assert!(
        error.starts_with("CompileLimitExceeded: policy is too expensive to compile: function body 1 of core module 1 has "),
        "{error}"
    );
    assert_eq!(verdict.loaded_digest.as_deref(), Some(good_digest.as_str()));
    let registry = &env.operator().shared.registry;
    assert_eq!(
        registry.get("fanout").ok().map(|p| p.digest().to_hex()),
        Some(good_digest.clone()),
        "the last good version keeps serving"
    );
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), &env.policy_namespace);
    let name = bomb_map.metadata.name.clone().expect("a name");
    let recorded = eventually("the refusal on the ConfigMap", || async {
        let map = maps.get(&name).await.ok()?;
        refusal::read(map.metadata.annotations.as_ref())
    })
    .await;
    assert_eq!(
        recorded.digest,
        policyhost::runtime::Digest::of(&bomb).to_hex()
    );
    let text = maps
        .get(&name)
        .await
        .expect("get")
        .metadata
        .annotations
        .and_then(|a| a.get(COMPILE_REFUSED_ANNOTATION).cloned())
        .unwrap_or_default();
    assert!(text.contains("\"functionBytes\""), "{text}");

    // A restart: the ConfigMap still carries the refused version, which is
    // refused again from the record, without being compiled.
    env.stop_operator().await;
    env.start_operator(OperatorSetup::configmaps()).await;
    eventually("the recalled refusal reported", || async {
        let events: kube::Api<k8s_openapi::api::core::v1::Event> =
            kube::Api::namespaced(env.client.clone(), &env.policy_namespace);
        let list = events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("PolicyRejected")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("not compiled again"))
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_refused_for_its_policys_compile_time_is_loaded_by_itself_once_the_time_is_regained()
 {
    // Any compile uses the budget and more; it is regained at a twentieth
    // of the time the compile took: after a compile of c, the next is
    // refused for 20 c.
    let budget = CompileBudget {
        seconds: Duration::from_millis(1),
        window: Duration::from_millis(20),
    };
    let env = Env::start_with(OperatorSetup {
        compile_budget: Some(budget),
        ..OperatorSetup::configmaps()
    })
    .await;
    let publish = async |bytes: &[u8]| {
        let map = configmap::build(
            "fanout",
            &env.policy_namespace,
            bytes,
            &for_every_namespace(),
            Compression::Auto,
        )
        .expect("a policy ConfigMap");
        publish::apply(&env.client, &map).await.expect("apply");
        publish::wait_observed(&env.client, &map, Duration::from_secs(60))
            .await
            .expect("verdict")
    };
    // Versions of this run only: the compile cache on disk has neither.
    let first = fanout_version(&format!("{}-1", env.namespace));
    let verdict = publish(&first).await;
    assert_eq!(verdict.error, None);
    let second = fanout_version(&format!("{}-2", env.namespace));
    let second_digest = policyhost::runtime::Digest::of(&second).to_hex();
    let verdict = publish(&second).await;
    let error = verdict.error.unwrap_or_default();
    assert!(
        error.starts_with("CompileBudgetExhausted: policy `fanout` used its compile time"),
        "{error}"
    );
    assert_eq!(
        verdict.loaded_digest,
        Some(policyhost::runtime::Digest::of(&first).to_hex()),
        "the first version keeps serving"
    );
    // Nothing changes the ConfigMap: the operator loads it again by itself.
    let registry = &env.operator().shared.registry;
    eventually("the second version served", || async {
        let serving = registry.get("fanout").ok()?.digest().to_hex();
        (serving == second_digest).then_some(())
    })
    .await;
}

/// `fanout` under another digest.
fn fanout_version(label: &str) -> Vec<u8> {
    variants::version(&guest_bytes("fanout"), label)
}

/// A small policy (`panics`, 100 KiB: it loads, and fails only when
/// called) under another digest: it compiles well within a tight time cap.
fn small_version(label: &str) -> Vec<u8> {
    variants::version(&guest_bytes("panics"), label)
}

/// Loads `bytes` as `spec` on a thread of its own; the load's result and
/// how long it took.
fn load_on_thread(
    runtime: &Runtime,
    spec: PolicySpec,
    bytes: Vec<u8>,
) -> std::thread::JoinHandle<(Result<(), Error>, Duration)> {
    let runtime = runtime.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let result = runtime.load(spec, &bytes).map(drop);
        (result, started.elapsed())
    })
}

/// Five policies of one team (`--team noisy=noisy-*`) publish components
/// that compile to the time cap at once: another team's next compile waits
/// for the one running when it came, not for one per policy of that team.
#[test]
fn one_teams_compiles_to_the_time_cap_delay_another_teams_by_at_most_one_compile() {
    // Within the static limits once they are raised: each of these
    // compiles until the time cap kills it. Twelve 6 MiB functions take
    // about 3 s on an idle machine (eight compiled within 2 s now and then,
    // and twelve once did too): a cap of 1 s kills each, however fast the
    // machine.
    let cap = Duration::from_secs(1);
    let config = || CompileConfig {
        limits: Footprint {
            function_bytes: u64::MAX,
            code_bytes: u64::MAX,
            ..Footprint::LIMITS
        },
        process: Some(capped(8 << 30, cap)),
        budget: None,
    };
    // A bomb that compiles is no test of the cap.
    let bombs: Vec<Vec<u8>> = (0..6)
        .map(|i| compile_bombs(12, (6 << 20) + 7 * i))
        .collect();

    // Alone: one capped compile, and the quiet policy's compile.
    let alone = runtime_with(config());
    let started = Instant::now();
    let refused = refusal_of(
        alone
            .load(PolicySpec::new("noisy"), &bombs[5])
            .expect_err("killed at its time cap"),
    );
    let one_bomb = started.elapsed();
    assert!(
        matches!(refused.limit, CompileLimit::Time { .. }),
        "{refused:?}"
    );
    let started = Instant::now();
    alone
        .load(PolicySpec::new("quiet"), &small_version("alone"))
        .expect("it compiles");
    let quiet_alone = started.elapsed();

    // Five such components of five policies of one team at once, then one
    // of another team.
    let teams = Teams::parse(["noisy=noisy-*"]).expect("the rule");
    let noisy_spec = |i: usize| {
        let name = format!("noisy-{i}");
        PolicySpec::new(&name).team(teams.team_of(&name))
    };
    let runtime = runtime_with(config());
    let noisy: Vec<_> = bombs[..5]
        .iter()
        .enumerate()
        .map(|(i, bomb)| load_on_thread(&runtime, noisy_spec(i), bomb.clone()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while runtime.compile_stats().started == 0 {
        assert!(Instant::now() < deadline, "no compile started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (quiet, quiet_took) = load_on_thread(
        &runtime,
        PolicySpec::new("quiet"),
        small_version("contended"),
    )
    .join()
    .expect("the quiet load");
    quiet.expect("it compiles");
    let compiles_before_quiet = 1;
    let mut noisy_done = Vec::new();
    for load in noisy {
        let (result, took) = load.join().expect("a noisy load");
        assert_eq!(result.map_err(|e| e.reason()), Err("CompileLimitExceeded"));
        noisy_done.push(took);
    }
    eprintln!(
        "one capped compile {one_bomb:?}, a small policy alone {quiet_alone:?}; \
         behind five capped compiles of another team {quiet_took:?}; \
         the noisy loads took {noisy_done:?}"
    );
    // The quiet policy waits for the compile running when it came, not for
    // the four queued behind it; the bound leaves a loaded machine room.
    let bound = one_bomb * (compiles_before_quiet + 1) + quiet_alone * 2;
    assert!(quiet_took < bound, "{quiet_took:?} ≥ {bound:?}");

    // The noisy team publishes one of them again: refused from memory,
    // without a compile.
    let stats = runtime.compile_stats();
    assert_eq!((stats.started, stats.refused), (6, 5));
    let again = refusal_of(
        runtime
            .load(noisy_spec(0), &bombs[0])
            .expect_err("refused again"),
    );
    assert!(again.remembered);
    assert_eq!(runtime.compile_stats().started, 6, "not compiled again");
    assert_eq!(runtime.compile_stats().recalled, 1);
}

#[test]
fn a_policy_that_used_its_compile_time_is_refused_without_a_compile_and_the_others_are_not() {
    let runtime = runtime_with(CompileConfig {
        // Any compile uses it all.
        budget: Some(CompileBudget {
            seconds: Duration::from_millis(1),
            window: Duration::from_secs(3600),
        }),
        ..CompileConfig::default()
    });
    let first = runtime
        .load(PolicySpec::new("a"), &fanout_version("a1"))
        .expect("the first compile is within the budget");
    let error = runtime
        .load(PolicySpec::new("a"), &fanout_version("a2"))
        .expect_err("over the budget");
    assert_eq!(error.reason(), "CompileBudgetExhausted");
    let Error::CompileBudgetExhausted {
        team, retry_after, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(team, "policy `a`");
    assert!(*retry_after > Duration::ZERO, "{retry_after:?}");
    assert!(
        error.to_string().starts_with(
            "policy `a` used its compile time (0 s per 3600 s); it may compile again in "
        ),
        "{error}"
    );
    assert_eq!(
        runtime.compile_stats().started,
        1,
        "refused before compiling"
    );
    assert_eq!(runtime.compile_stats().over_budget, 1);
    // A cache hit costs no compile time: it is served.
    let hit = runtime
        .load(PolicySpec::new("a"), &fanout_version("a1"))
        .expect("a cache hit");
    assert_eq!(hit.source(), Source::Memory);
    // Another policy has its own budget.
    runtime
        .load(PolicySpec::new("b"), &fanout_version("b1"))
        .expect("another policy compiles");
    drop(first);
}
