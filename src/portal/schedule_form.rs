//! The schedule form: one set of fields for creating and editing a
//! schedule, turned into the same JSON document the API takes (and so
//! checked by the same rules), and the preview of its next runs.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    layout,
    session::Session,
    target_form::{field, Field},
    when,
};
use crate::{
    domain::{
        schedule::{Rule, Schedule},
        target::{FieldError, Target},
    },
    wire::schedule as wire,
};

/// Runs the preview shows.
const PREVIEW_RUNS: usize = 5;

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScheduleForm {
    pub(super) csrf: String,
    name: String,
    pub(super) target_id: String,
    /// `cron` or `every`.
    kind: String,
    cron: String,
    every: String,
    time_zone: String,
    payload: String,
    ordering_key: String,
    /// Local date-times in `time_zone`; empty is none.
    start_at: String,
    end_at: String,
    /// The preview button: show the runs, save nothing.
    pub(super) preview: Option<String>,
}

impl ScheduleForm {
    pub(super) fn blank() -> Self {
        Self {
            kind: "cron".into(),
            cron: "0 9 * * MON-FRI".into(),
            every: "1h".into(),
            time_zone: "UTC".into(),
            ..Self::default()
        }
    }

    pub(super) fn of(s: &Schedule) -> Self {
        let local = |t: Option<DateTime<Utc>>| {
            t.map(|t| {
                t.with_timezone(&s.zone)
                    .format("%Y-%m-%dT%H:%M:%S")
                    .to_string()
            })
            .unwrap_or_default()
        };
        Self {
            name: s.name.clone(),
            target_id: s.target_id.to_string(),
            kind: if s.recurrence.cron().is_some() {
                "cron"
            } else {
                "every"
            }
            .into(),
            cron: s.recurrence.cron().unwrap_or("0 9 * * MON-FRI").into(),
            every: s.recurrence.every().unwrap_or("1h").into(),
            time_zone: s.zone.name().into(),
            payload: s.payload.as_str().into(),
            ordering_key: s.ordering_key.as_deref().unwrap_or_default().to_string(),
            start_at: local(s.start_at),
            end_at: local(s.end_at),
            ..Self::default()
        }
    }

    /// The document the API would take, or what is wrong with the times.
    pub(super) fn document(&self, now: DateTime<Utc>) -> Result<Value, Vec<FieldError>> {
        let mut errors = Vec::new();
        let zone = if self.time_zone.trim().is_empty() {
            "UTC"
        } else {
            self.time_zone.trim()
        };
        if let Err(e) = crate::domain::schedule::parse_zone(zone) {
            // Start and end are read in it: say what is wrong once, where it is.
            return Err(vec![FieldError::new("timeZone", e.0)]);
        }
        let mut instant = |s: &str, name: &str| match s.trim() {
            "" => Value::Null,
            s => match when::resolve(s, &self.time_zone, now) {
                Ok(t) => Value::String(crate::domain::time::format(&t)),
                Err(e) => {
                    errors.push(FieldError::new(name, e));
                    Value::Null
                }
            },
        };
        let start_at = instant(&self.start_at, "startAt");
        let end_at = instant(&self.end_at, "endAt");
        let text = |s: &str| match s.trim() {
            "" => Value::Null,
            s => Value::String(s.to_string()),
        };
        let cron = self.kind == "cron";
        let doc = json!({
            "targetId": self.target_id.trim(),
            "name": self.name.trim(),
            "cron": if cron { text(&self.cron) } else { Value::Null },
            "every": if cron { Value::Null } else { text(&self.every) },
            "timeZone": zone,
            "payload": self.payload,
            "orderingKey": text(&self.ordering_key),
            "startAt": start_at,
            "endAt": end_at,
        });
        if errors.is_empty() {
            Ok(doc)
        } else {
            Err(errors)
        }
    }

    /// The next runs from now, or what is wrong with the rule.
    fn preview(&self, now: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>, Vec<FieldError>> {
        let mut doc = self.document(now)?;
        // The preview needs no target.
        doc["targetId"] = json!("DI-T-0000000000");
        if doc["payload"].as_str().is_none_or(str::is_empty) {
            doc["payload"] = json!("-");
        }
        let spec = wire::parse(&doc)?;
        let rule = Rule {
            recurrence: spec.recurrence,
            zone: spec.zone,
            anchor: spec.start_at.unwrap_or(now),
            end_at: spec.end_at,
        };
        Ok(rule.runs_from(now).take(PREVIEW_RUNS).collect())
    }
}

/// `2027-03-08 09:30:00 Asia/Tokyo`, with UTC beside it and, by script, the
/// reader's own zone.
pub(super) fn in_zone(t: &DateTime<Utc>, zone: Tz) -> Markup {
    let machine = crate::domain::time::format(t);
    html! {
        time datetime=(machine) data-local {
            (t.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S")) " " (zone.name())
        }
        @if zone != Tz::UTC {
            " " small.utc { "(" (t.format("%H:%M:%S UTC")) ")" }
        }
    }
}

pub(super) fn rule_text(s: &Schedule) -> Markup {
    html! {
        @if let Some(c) = s.recurrence.cron() { code { (c) } }
        @if let Some(e) = s.recurrence.every() { "every " code { (e) } }
        " in " (s.zone.name())
    }
}

fn runs_list(result: &Result<Vec<DateTime<Utc>>, Vec<FieldError>>, zone: &str) -> Markup {
    let zone: Tz = zone.trim().parse().unwrap_or(Tz::UTC);
    html! {
        @match result {
            Ok(runs) if runs.is_empty() => p { "No run is left: the schedule has ended." }
            Ok(runs) => ol.runs { @for t in runs { li { (in_zone(t, zone)) } } }
            Err(errors) => ul.error { @for e in errors { li { code { (e.field) } " " (e.message) } } }
        }
    }
}

/// The preview's part of the page, which the script replaces as one types.
pub(super) fn preview_section(f: &ScheduleForm, now: DateTime<Utc>) -> Markup {
    html! {
        section #preview aria-live="polite" aria-labelledby="preview-title" {
            h2 #preview-title { "Next " (PREVIEW_RUNS) " runs" }
            (runs_list(&f.preview(now), &f.time_zone))
        }
    }
}

pub(super) fn form(
    session: &Session,
    action: &str,
    f: &ScheduleForm,
    targets: &[Target],
    errors: &[FieldError],
    now: DateTime<Utc>,
) -> Markup {
    let input = |name, label, value, hint, kind| {
        field(
            Field {
                name,
                label,
                value,
                hint,
                kind,
            },
            errors,
        )
    };
    html! {
        form.schedule-form method="post" action=(action) novalidate data-schedule-form {
            (layout::csrf_field(session))
            @if !errors.is_empty() {
                div.error-summary role="alert" tabindex="-1" {
                    h2 { "The schedule was not saved" }
                    ul { @for e in errors { li { code { (e.field) } " " (e.message) } } }
                }
            }
            (input("name", "Name", &f.name, None, "text"))
            div.field {
                label for="f-targetId" { "Target" }
                select #f-targetId name="targetId" {
                    @for t in targets {
                        option value=(t.id) selected[t.id.as_str() == f.target_id] { (t.name) " (" (t.id) ")" }
                    }
                }
                @if let Some(e) = errors.iter().find(|e| e.field == "targetId") { span.error { (e.message) } }
            }
            fieldset.kinds {
                legend { "Runs" }
                label { input type="radio" name="kind" value="cron" checked[f.kind == "cron"]; " By a cron expression" }
                label { input type="radio" name="kind" value="every" checked[f.kind != "cron"]; " Every fixed period" }
            }
            (input("cron", "Cron expression", &f.cron,
                Some("Five fields: minute hour day-of-month month day-of-week, e.g. 30 9 * * MON-FRI. Used when runs are by a cron expression."), "text"))
            (input("every", "Every", &f.every,
                Some("At least 1s: 30s, 15m, 1h, 1h 30m. Used when runs are every fixed period."), "text"))
            (input("timeZone", "Time zone", &f.time_zone,
                Some("An IANA name such as Europe/Stockholm; cron times and the start and end are read in it."), "text"))
            (input("startAt", "Start", &f.start_at, Some("Optional: no run before it (in the time zone above)."), "datetime-local"))
            (input("endAt", "End", &f.end_at, Some("Optional: no run after it."), "datetime-local"))
            (input("payload", "Payload", &f.payload, Some("Each run's message carries it."), "textarea"))
            (input("orderingKey", "Ordering key", &f.ordering_key, Some("Optional: runs go one at a time, in order."), "text"))
            (preview_section(f, now))
            div.actions {
                button #save-schedule type="submit" { "Save schedule" }
                button.secondary type="submit" name="preview" value="1" { "Preview runs" }
                a href="/portal/schedules" { "Cancel" }
            }
        }
    }
}
