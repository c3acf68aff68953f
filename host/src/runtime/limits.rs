//! Per-call limits of a policy, and how they are clamped to the host's maxima.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The caps applied to every call of one policy.
///
/// A policy asks for its limits (in its ConfigMap, or on the command line);
/// the host clamps each of them to its own [`HostMaxima`] with
/// [`PolicyLimits::resolve`], and says so when it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Largest linear memory (and the sum of tables, in bytes) one call may use.
    pub memory_bytes: u64,
    /// Fuel per call: roughly the number of WebAssembly instructions.
    pub fuel: u64,
    /// Wall-clock deadline of one call.
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// Largest result, in bytes of strings (manifests, messages, outputs).
    pub output_bytes: u64,
    /// Largest number of desired children in one result.
    pub children: u32,
}

impl Default for Limits {
    /// Defaults for a policy that asks for nothing: generous for a policy
    /// that builds a few hundred children, small enough to keep a misbehaving
    /// one cheap.
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            fuel: 500_000_000,
            timeout: Duration::from_secs(1),
            output_bytes: 4 << 20,
            children: 1000,
        }
    }
}

/// The largest limits any policy may get on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HostMaxima(pub Limits);

impl Default for HostMaxima {
    fn default() -> Self {
        Self(Limits {
            memory_bytes: 256 << 20,
            fuel: 10_000_000_000,
            timeout: Duration::from_secs(10),
            output_bytes: 16 << 20,
            children: 10_000,
        })
    }
}

/// The limits a policy asks for; unset fields take the host's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyLimits {
    /// See [`Limits::memory_bytes`].
    pub memory_bytes: Option<u64>,
    /// See [`Limits::fuel`].
    pub fuel: Option<u64>,
    /// See [`Limits::timeout`], in milliseconds.
    pub timeout_ms: Option<u64>,
    /// See [`Limits::output_bytes`].
    pub output_bytes: Option<u64>,
    /// See [`Limits::children`].
    pub children: Option<u32>,
}

/// Which limit was clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LimitKind {
    /// [`Limits::memory_bytes`].
    MemoryBytes,
    /// [`Limits::fuel`].
    Fuel,
    /// [`Limits::timeout`] (values in milliseconds).
    TimeoutMs,
    /// [`Limits::output_bytes`].
    OutputBytes,
    /// [`Limits::children`].
    Children,
    /// The policy's fair share ([`crate::fair::Share`]), clamped to the
    /// host's `--max-share`.
    Share,
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::MemoryBytes => "memoryBytes",
            Self::Fuel => "fuel",
            Self::TimeoutMs => "timeoutMs",
            Self::OutputBytes => "outputBytes",
            Self::Children => "children",
            Self::Share => "share",
        })
    }
}

/// A limit the policy asked for that is above the host's maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Clamped {
    /// Which limit.
    pub limit: LimitKind,
    /// What the policy asked for.
    pub requested: u64,
    /// What it gets: the host maximum.
    pub applied: u64,
}

impl std::fmt::Display for Clamped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} clamped to the host maximum {}",
            self.limit, self.requested, self.applied
        )
    }
}

impl PolicyLimits {
    /// Fills unset fields from `defaults` and clamps every field to `maxima`.
    ///
    /// Returns the limits to apply and one [`Clamped`] per limit that was
    /// lowered, so that the caller can report it (never silently). Defaults
    /// above a maximum are lowered too, and reported.
    #[must_use]
    pub fn resolve(&self, defaults: &Limits, maxima: &HostMaxima) -> (Limits, Vec<Clamped>) {
        let max = &maxima.0;
        let mut clamped = Vec::new();
        let mut clamp = |limit: LimitKind, requested: u64, maximum: u64| {
            if requested > maximum {
                clamped.push(Clamped {
                    limit,
                    requested,
                    applied: maximum,
                });
                maximum
            } else {
                requested
            }
        };
        let timeout_ms = clamp(
            LimitKind::TimeoutMs,
            self.timeout_ms.unwrap_or(millis_of(defaults.timeout)),
            millis_of(max.timeout),
        );
        let limits = Limits {
            memory_bytes: clamp(
                LimitKind::MemoryBytes,
                self.memory_bytes.unwrap_or(defaults.memory_bytes),
                max.memory_bytes,
            ),
            fuel: clamp(
                LimitKind::Fuel,
                self.fuel.unwrap_or(defaults.fuel),
                max.fuel,
            ),
            timeout: Duration::from_millis(timeout_ms),
            output_bytes: clamp(
                LimitKind::OutputBytes,
                self.output_bytes.unwrap_or(defaults.output_bytes),
                max.output_bytes,
            ),
            children: u32::try_from(clamp(
                LimitKind::Children,
                u64::from(self.children.unwrap_or(defaults.children)),
                u64::from(max.children),
            ))
            .unwrap_or(max.children),
        };
        (limits, clamped)
    }
}

fn millis_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::millis_of(*value))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_limits_take_the_defaults_unclamped() {
        let (limits, clamped) =
            PolicyLimits::default().resolve(&Limits::default(), &HostMaxima::default());
        assert_eq!(limits, Limits::default());
        assert!(clamped.is_empty());
    }

    #[test]
    fn limits_above_the_maxima_are_clamped_and_reported() {
        let maxima = HostMaxima::default();
        let asked = PolicyLimits {
            memory_bytes: Some(1 << 40),
            fuel: Some(5),
            timeout_ms: Some(60_000),
            output_bytes: None,
            children: Some(u32::MAX),
        };
        let (limits, clamped) = asked.resolve(&Limits::default(), &maxima);
        assert_eq!(limits.memory_bytes, maxima.0.memory_bytes);
        assert_eq!(limits.fuel, 5);
        assert_eq!(limits.timeout, maxima.0.timeout);
        assert_eq!(limits.output_bytes, Limits::default().output_bytes);
        assert_eq!(limits.children, maxima.0.children);
        let kinds: Vec<LimitKind> = clamped.iter().map(|c| c.limit).collect();
        assert_eq!(
            kinds,
            [
                LimitKind::TimeoutMs,
                LimitKind::MemoryBytes,
                LimitKind::Children
            ]
        );
        assert_eq!(
            clamped[0].to_string(),
            "timeoutMs 60000 clamped to the host maximum 10000"
        );
    }

    #[test]
    fn defaults_above_a_low_maximum_are_clamped_too() {
        let mut maxima = HostMaxima::default();
        maxima.0.fuel = 1000;
        let (limits, clamped) = PolicyLimits::default().resolve(&Limits::default(), &maxima);
        assert_eq!(limits.fuel, 1000);
        assert_eq!(clamped.len(), 1);
        assert_eq!(clamped[0].requested, Limits::default().fuel);
    }
}
