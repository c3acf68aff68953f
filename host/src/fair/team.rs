//! Teams: the unit that policy publication is fair between.
//!
//! Publishing a version costs the host a load, perhaps a pull and a
//! compile; a team that holds many policies must not get a turn per policy
//! where another team gets one. So the loads, the pulls and the compile
//! slot and budget are divided between teams, not policies.
//!
//! A team is named by the platform team, never by a publisher: `--team
//! NAME=PATTERN[,PATTERN…]` gives team `NAME` the policies whose names
//! match a pattern (a policy name, or a prefix ending in `*`); the longest
//! matching pattern decides. A policy no rule names is a team of its own.
//! On a strict host the platform team already decides which policy names a
//! team may publish (its Role names `policy-<name>` and
//! `candidate-<name>`), so the same list is what it gives here.

use std::sync::Arc;

use super::{Share, Tenant};

/// The team a policy belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Team {
    /// `team:<name>` for a named team, the policy's name for a policy of
    /// its own (a policy name is a DNS label: it never holds `:`).
    key: Arc<str>,
}

impl Team {
    /// The team of a policy no rule names: itself.
    #[must_use]
    pub fn of_policy(policy: &str) -> Self {
        Self { key: policy.into() }
    }

    fn named(name: &str) -> Self {
        Self {
            key: format!("team:{name}").into(),
        }
    }

    /// Its tenant in the fair divisions of publication (every team weighs
    /// the same there: `share` buys guest-call threads).
    #[must_use]
    pub fn tenant(&self) -> Tenant {
        Tenant::new(Arc::clone(&self.key), Share::DEFAULT)
    }

    /// What tells it apart from every other team.
    #[must_use]
    pub fn key(&self) -> &Arc<str> {
        &self.key
    }
}

impl std::fmt::Display for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.key.strip_prefix("team:") {
            Some(name) => write!(f, "team `{name}`"),
            None => write!(f, "policy `{}`", self.key),
        }
    }
}

/// Which policies each team holds (`--team`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Teams {
    /// Every pattern with its team, longest pattern first.
    rules: Vec<(Pattern, Team)>,
}

/// The policy names a rule gives its team.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// This name.
    Name(String),
    /// Every name starting with this.
    Prefix(String),
}

impl Pattern {
    fn parse(text: &str) -> Option<Self> {
        let name = text.strip_suffix('*').unwrap_or(text);
        let valid = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.contains('*');
        match (valid, text.ends_with('*')) {
            (true, true) => Some(Self::Prefix(name.to_owned())),
            (true, false) if !name.is_empty() => Some(Self::Name(name.to_owned())),
            _ => None,
        }
    }

    fn matches(&self, policy: &str) -> bool {
        match self {
            Self::Name(name) => name == policy,
            Self::Prefix(prefix) => policy.starts_with(prefix.as_str()),
        }
    }

    /// How specific it is: a name beats every prefix, a longer prefix a
    /// shorter one.
    fn specificity(&self) -> usize {
        match self {
            Self::Name(_) => usize::MAX,
            Self::Prefix(prefix) => prefix.len(),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// Why a `--team` rule is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TeamError {
    /// Not `NAME=PATTERN[,PATTERN…]`, or the name is not a DNS label.
    #[error(
        "`{0}` is not a team rule: NAME=PATTERN[,PATTERN…], NAME a DNS label (lowercase letters, digits and `-`)"
    )]
    Syntax(String),
    /// A pattern is neither a policy name nor a prefix ending in `*`.
    #[error(
        "`{pattern}` in the rule of team `{team}` is not a policy name or a prefix ending in `*`"
    )]
    Pattern {
        /// The team.
        team: String,
        /// The pattern.
        pattern: String,
    },
    /// Two rules name the same team, or give one pattern to two teams:
    /// which one holds the policy would be unclear.
    #[error("`{0}` is named by two team rules: give each team one rule, each pattern one team")]
    Twice(String),
}

impl Teams {
    /// Teams from `--team` rules.
    ///
    /// # Errors
    ///
    /// [`TeamError`] naming the first rule refused.
    pub fn parse<'a>(rules: impl IntoIterator<Item = &'a str>) -> Result<Self, TeamError> {
        let mut teams = Self::default();
        let mut names: Vec<&str> = Vec::new();
        for rule in rules {
            let syntax = || TeamError::Syntax(rule.to_owned());
            let (name, patterns) = rule.split_once('=').ok_or_else(syntax)?;
            let name = name.trim();
            if Pattern::parse(name) != Some(Pattern::Name(name.to_owned())) {
                return Err(syntax());
            }
            if names.contains(&name) {
                return Err(TeamError::Twice(name.to_owned()));
            }
            names.push(name);
            let team = Team::named(name);
            for text in patterns.split(',').map(str::trim) {
                let pattern = Pattern::parse(text).ok_or_else(|| TeamError::Pattern {
                    team: name.to_owned(),
                    pattern: text.to_owned(),
                })?;
                if teams.rules.iter().any(|(known, _)| *known == pattern) {
                    return Err(TeamError::Twice(pattern.to_string()));
                }
                teams.rules.push((pattern, team.clone()));
            }
        }
        teams
            .rules
            .sort_by_key(|(pattern, _)| std::cmp::Reverse(pattern.specificity()));
        Ok(teams)
    }

    /// The team of `policy`.
    #[must_use]
    pub fn team_of(&self, policy: &str) -> Team {
        self.rules
            .iter()
            .find(|(pattern, _)| pattern.matches(policy))
            .map_or_else(|| Team::of_policy(policy), |(_, team)| team.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_matching_pattern_names_the_team_and_the_rest_are_their_own() {
        let teams =
            Teams::parse(["data=etl,etl-*", "reports=etl-reports*, billing"]).expect("the rules");
        let data = teams.team_of("etl");
        assert_eq!(data, teams.team_of("etl-nightly"));
        assert_eq!(data.to_string(), "team `data`");
        let reports = teams.team_of("etl-reports-daily");
        assert_eq!(reports.to_string(), "team `reports`");
        assert_eq!(teams.team_of("billing"), reports);
        let own = teams.team_of("etl2");
        assert_eq!(own, Team::of_policy("etl2"));
        assert_eq!(own.to_string(), "policy `etl2`");
        assert_ne!(
            Teams::parse(["etl=x"]).expect("a rule").team_of("x"),
            Team::of_policy("etl"),
            "a team is never taken for a policy of the same name"
        );
        assert_eq!(Teams::default().team_of("p"), Team::of_policy("p"));
    }

    #[test]
    fn rules_that_are_unclear_are_refused_naming_the_problem() {
        assert_eq!(
            Teams::parse(["data"]).unwrap_err().to_string(),
            "`data` is not a team rule: NAME=PATTERN[,PATTERN…], NAME a DNS label (lowercase letters, digits and `-`)"
        );
        assert!(matches!(
            Teams::parse(["Data=etl"]),
            Err(TeamError::Syntax(_))
        ));
        assert_eq!(
            Teams::parse(["data=etl,*x"]).unwrap_err().to_string(),
            "`*x` in the rule of team `data` is not a policy name or a prefix ending in `*`"
        );
        assert!(matches!(
            Teams::parse(["data=etl,"]),
            Err(TeamError::Pattern { .. })
        ));
        assert_eq!(
            Teams::parse(["a=x*", "b=x*"]).unwrap_err(),
            TeamError::Twice("x*".into())
        );
        assert_eq!(
            Teams::parse(["a=x", "a=y"]).unwrap_err().to_string(),
            "`a` is named by two team rules: give each team one rule, each pattern one team"
        );
        // `*` alone gives every other policy to one team.
        let all = Teams::parse(["everyone=*", "data=etl"]).expect("the rules");
        assert_eq!(all.team_of("etl").to_string(), "team `data`");
        assert_eq!(all.team_of("other").to_string(), "team `everyone`");
    }
}
