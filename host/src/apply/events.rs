//! Kubernetes Events on DataJobs (`events.k8s.io/v1`), from the policy and the host.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tracing::warn;

use crate::crd::DataJob;

/// The longest reason the Events API accepts.
const MAX_REASON: usize = 128;
/// The longest note the Events API accepts.
const MAX_NOTE: usize = 1024;

/// Records Events on DataJobs; repeated Events become a series.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// A recorder reporting as `policyhost`, instance `instance`.
    #[must_use]
    pub fn new(client: Client, instance: &str) -> Self {
        let reporter = Reporter {
            controller: "policyhost".into(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Records an Event on `job`. A failure to record is logged, never fatal:
    /// Events are for people, the status is the record.
    pub async fn publish(
        &self,
        job: &DataJob,
        warning: bool,
        action: &str,
        reason: &str,
        message: &str,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: truncate(reason, MAX_REASON),
            note: Some(truncate(message, MAX_NOTE)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &job.object_ref(&())).await {
            warn!(%error, reason, "cannot record event");
        }
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        assert_eq!(truncate("aé", 2), "a");
    }
}
