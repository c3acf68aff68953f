//! Loading a policy: bytes → digest → compile (cached; within the static
//! limits and caps of [`super::compile`]) → validate world and imports →
//! pre-link once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker};

use super::bindings::DatajobPolicyPre;
use super::cache::{Cache, Digest, Source};
use super::compile::{Compiler, Refusal};
use super::engine::Engine;
use super::error::{Error, Result};
use super::limits::{Clamped, HostMaxima, LimitKind, Limits, PolicyLimits};
use super::logs::{Budget, Budgets};
use super::made_with::{self, MadeWith};
use super::output::AllowedKind;
use super::store::StoreState;
use super::wasi;
use crate::fair::{Share, Team, Tenant};
use crate::outbound::{Outbound, Redactor};

/// What the host is told about a policy besides its bytes (from its
/// ConfigMap, or the command line).
#[derive(Debug, Clone)]
pub struct PolicySpec {
    /// The policy's name (`DataJob.spec.policy`).
    pub name: String,
    /// The limits it asks for.
    pub limits: PolicyLimits,
    /// The kinds it may create.
    pub allowed_kinds: Vec<AllowedKind>,
    /// A refusal to compile these bytes recorded earlier (by a previous
    /// run of the host, on the policy's ConfigMap): if it names the same
    /// digest and limits, the component is refused again without compiling.
    pub remembered: Option<Refusal>,
    /// The fair share it asks for (unset: [`Share::DEFAULT`]).
    pub share: Option<Share>,
    /// Its outbound grant, credentials read (unset: no network).
    pub outbound: Option<Arc<Outbound>>,
    /// The team whose compile slot turn and budget its compile takes
    /// (unset: a team of its own, see [`crate::fair::Teams`]).
    pub team: Option<Team>,
}

impl PolicySpec {
    /// A policy with default limits and the default allowed kinds.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            limits: PolicyLimits::default(),
            allowed_kinds: AllowedKind::defaults(),
            remembered: None,
            share: None,
            outbound: None,
            team: None,
        }
    }

    /// Compiles as one of `team`'s policies.
    #[must_use]
    pub fn team(mut self, team: Team) -> Self {
        self.team = Some(team);
        self
    }

    /// Grants outbound HTTP.
    #[must_use]
    pub fn outbound(mut self, outbound: Option<Arc<Outbound>>) -> Self {
        self.outbound = outbound;
        self
    }

    /// Asks for this fair share.
    #[must_use]
    pub fn share(mut self, share: Option<Share>) -> Self {
        self.share = share;
        self
    }

    /// Asks for these limits.
    #[must_use]
    pub fn limits(mut self, limits: PolicyLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Recalls a refusal recorded earlier (see [`PolicySpec::remembered`]).
    #[must_use]
    pub fn remembered(mut self, refusal: Option<Refusal>) -> Self {
        self.remembered = refusal;
        self
    }

    /// Replaces the allowed kinds.
    #[must_use]
    pub fn allowed_kinds(mut self, kinds: Vec<AllowedKind>) -> Self {
        self.allowed_kinds = kinds;
        self
    }
}

/// A validated, compiled and pre-linked policy, ready for any number of calls.
///
/// It is immutable: a new version of the policy is a new `Policy`, and
/// in-flight calls finish on the one they started with.
pub struct Policy {
    pub(crate) name: Arc<str>,
    pub(crate) digest: Digest,
    pub(crate) digest_hex: String,
    pub(crate) pre: DatajobPolicyPre<StoreState>,
    pub(crate) limits: Limits,
    pub(crate) clamped: Vec<Clamped>,
    pub(crate) allowed_kinds: Vec<AllowedKind>,
    pub(crate) tenant: Tenant,
    pub(crate) imports: Vec<String>,
    pub(crate) size: usize,
    pub(crate) load_time: Duration,
    pub(crate) source: Source,
    /// The log rate budget of the policy's name, shared by its versions.
    pub(crate) log_budget: Arc<Budget>,
    /// Its outbound grant, if it imports `wasi:http` and has one.
    pub(crate) outbound: Option<Arc<Outbound>>,
    /// The SDK it says it was built with, if it says.
    pub(crate) made_with: Option<MadeWith>,
    /// The compiled code: held here so that the compile cache keeps it
    /// exactly as long as a policy uses it (see `cache::Cache`).
    pub(crate) code: Arc<Component>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("digest", &self.digest_hex)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// The SDK it was built with, as its `policyhost-sdk` section says
    /// ([`made_with`]); `None` for a component built without one.
    #[must_use]
    pub fn made_with(&self) -> Option<&MadeWith> {
        self.made_with.as_ref()
    }

    /// The bytes of its compiled code in memory (shared by every call and
    /// by every version of the same digest).
    #[must_use]
    pub fn code_bytes(&self) -> usize {
        let range = self.code.image_range();
        (range.end as usize).saturating_sub(range.start as usize)
    }

    /// The policy's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SHA-256 digest of the component.
    #[must_use]
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The limits every call gets (after clamping).
    #[must_use]
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The limits that were lowered to the host maxima.
    #[must_use]
    pub fn clamped(&self) -> &[Clamped] {
        &self.clamped
    }

    /// The kinds the policy may create.
    #[must_use]
    pub fn allowed_kinds(&self) -> &[AllowedKind] {
        &self.allowed_kinds
    }

    /// The policy as a tenant of the host: its name and its fair share
    /// (after clamping).
    #[must_use]
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// The component's imports, e.g. `wasi:cli/environment@0.2.3`.
    #[must_use]
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// Size of the component, in bytes.
    #[must_use]
    pub fn size(&self) -> usize {
        self.size
    }

    /// How long getting compiled code took (compile, or cache lookup).
    #[must_use]
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Where the compiled code came from.
    #[must_use]
    pub fn source(&self) -> Source {
        self.source
    }

    /// Its outbound grant: set when the component imports `wasi:http`.
    #[must_use]
    pub fn outbound(&self) -> Option<&Outbound> {
        self.outbound.as_deref()
    }

    /// What keeps its grant's credentials out of what it says: finds
    /// nothing without one.
    #[must_use]
    pub fn redactor(&self) -> &Redactor {
        static NONE: Redactor = Redactor::none();
        self.outbound.as_deref().map_or(&NONE, Outbound::redactor)
    }
}

/// The names the world requires the component to export, with their
/// parameter names (a cheap check that names the export at fault).
const EXPORTS: &[(&str, &[&str])] = &[
    ("reconcile", &["job", "children", "ctx"]),
    ("cleanup", &["job", "children", "ctx"]),
];

pub(crate) struct Loader<'a> {
    pub(crate) engine: &'a Engine,
    pub(crate) linker: &'a Linker<StoreState>,
    pub(crate) outbound_linker: &'a Linker<StoreState>,
    pub(crate) cache: &'a Cache,
    pub(crate) compiler: &'a Compiler,
    pub(crate) defaults: &'a Limits,
    pub(crate) maxima: &'a HostMaxima,
    pub(crate) budgets: &'a Budgets,
    pub(crate) max_share: Share,
}

impl Loader<'_> {
    pub(crate) fn load(&self, spec: PolicySpec, bytes: &[u8]) -> Result<Policy> {
        let started = Instant::now();
        check_header(bytes)?;
        let made_with = made_with::read(bytes)?;
        let digest = Digest::of(bytes);
        if let Some(refusal) = self.compiler.recall(digest, spec.remembered.as_ref()) {
            return Err(Error::CompileLimitExceeded(refusal));
        }
        let engine = self.engine.wasmtime();
        let (component, source) = match self.cache.lookup(self.engine, digest) {
            Some(found) => found,
            None => {
                let team = spec
                    .team
                    .clone()
                    .unwrap_or_else(|| Team::of_policy(&spec.name));
                self.compile(&team, digest, bytes)?
            }
        };
        let load_time = started.elapsed();
        let pre = self.link(&component, spec.outbound.is_some())?;
        let imports: Vec<String> = component
            .component_type()
            .imports(engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        // A grant serves only a component that uses it: one that does not
        // import `wasi:http` keeps the sandbox's linker and its call path.
        let outbound = spec
            .outbound
            .filter(|_| imports.iter().any(|name| wasi::is_outbound_import(name)));
        let (limits, mut clamped) = spec.limits.resolve(self.defaults, self.maxima);
        let share = spec.share.unwrap_or_default();
        if share > self.max_share {
            clamped.push(Clamped {
                limit: LimitKind::Share,
                requested: u64::from(share.get()),
                applied: u64::from(self.max_share.get()),
            });
        }
        let share = share.min(self.max_share);
        for c in &clamped {
            tracing::warn!(policy = %spec.name, limit = %c.limit, requested = c.requested, applied = c.applied, "policy limit clamped to the host maximum");
        }
        tracing::debug!(policy = %spec.name, %digest, ?source, ?load_time, "policy loaded");
        let name: Arc<str> = spec.name.into();
        Ok(Policy {
            code: component,
            log_budget: self.budgets.of(&name),
            tenant: Tenant::new(Arc::clone(&name), share),
            name,
            digest,
            digest_hex: digest.to_hex(),
            pre,
            limits,
            clamped,
            allowed_kinds: spec.allowed_kinds,
            imports,
            size: bytes.len(),
            load_time,
            source,
            outbound,
            made_with,
        })
    }

    /// Compiles `bytes` for a policy of `team`: static limits, then the
    /// team's turn at the compile slot. While it waited, another load may
    /// have compiled the same digest (then this is a memory hit) or had it
    /// refused (then it is refused again, not compiled).
    fn compile(
        &self,
        team: &Team,
        digest: Digest,
        bytes: &[u8],
    ) -> Result<(Arc<Component>, Source)> {
        self.compiler.check(digest, bytes)?;
        let turn = self.compiler.turn(team)?;
        if let Some(refusal) = self.compiler.recall(digest, None) {
            return Err(Error::CompileLimitExceeded(refusal));
        }
        if let Some(found) = self.cache.lookup(self.engine, digest) {
            return Ok(found);
        }
        let component = self.compiler.compile(&turn, self.engine, digest, bytes)?;
        Ok((
            self.cache.insert(self.engine, digest, component),
            Source::Compiled,
        ))
    }

    /// Validates imports and exports, then pre-links: with `wasi:http`
    /// when the component imports it and is `granted`.
    fn link(&self, component: &Component, granted: bool) -> Result<DatajobPolicyPre<StoreState>> {
        let engine = self.engine.wasmtime();
        let ty = component.component_type();
        let mut unsupported = ty
            .imports(engine)
            .map(|(name, _)| name)
            .filter(|name| !wasi::is_allowed_import(name))
            .map(str::to_owned);
        if let Some(import) = unsupported.next() {
            return Err(Error::UnsupportedImport {
                import,
                others: unsupported.collect(),
            });
        }
        let outbound = ty
            .imports(engine)
            .map(|(name, _)| name)
            .find(|name| wasi::is_outbound_import(name));
        let linker = match (outbound, granted) {
            (None, _) => self.linker,
            (Some(_), true) => self.outbound_linker,
            (Some(import), false) => {
                return Err(Error::OutboundNotGranted {
                    import: import.to_owned(),
                });
            }
        };
        for (export, params) in EXPORTS {
            let problem = match ty.get_export(engine, export).map(|e| e.ty) {
                None => Some(format!("missing export `{export}`")),
                Some(ComponentItem::ComponentFunc(func)) => {
                    let names: Vec<&str> = func.params().map(|(name, _)| name).collect();
                    (names != *params || func.results().len() != 1).then(|| {
                        format!(
                            "export `{export}` has the wrong signature (parameters {names:?}, expected {params:?} and one result)"
                        )
                    })
                }
                Some(_) => Some(format!("export `{export}` is not a function")),
            };
            if let Some(problem) = problem {
                return Err(Error::IncompatibleWorld {
                    problem,
                    source: None,
                });
            }
        }
        let instance_pre =
            linker
                .instantiate_pre(component)
                .map_err(|source| Error::IncompatibleWorld {
                    problem: "an import does not have the type the host provides".into(),
                    source: Some(source),
                })?;
        DatajobPolicyPre::new(instance_pre).map_err(|source| Error::IncompatibleWorld {
            problem: "export `reconcile` or `cleanup` does not have the contract's types".into(),
            source: Some(source),
        })
    }
}

/// Tells a component from a core module and from garbage before compiling.
fn check_header(bytes: &[u8]) -> Result<()> {
    const MAGIC: &[u8] = b"\0asm";
    const CORE_VERSION: &[u8] = &[1, 0, 0, 0];
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(Error::Corrupt(wasmtime::format_err!(
            "missing the WebAssembly magic bytes `\\0asm` ({} bytes)",
            bytes.len()
        )));
    }
    if &bytes[4..8] == CORE_VERSION {
        return Err(Error::CoreModule);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_core_modules_are_told_apart_by_their_header() {
        assert!(matches!(
            check_header(b"hello world"),
            Err(Error::Corrupt(_))
        ));
        assert!(matches!(check_header(b"\0as"), Err(Error::Corrupt(_))));
        assert!(matches!(
            check_header(b"\0asm\x01\0\0\0"),
            Err(Error::CoreModule)
        ));
        assert!(check_header(b"\0asm\x0d\0\x01\0").is_ok());
    }
}
