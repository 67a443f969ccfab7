//! One labelled input of the target form, with its hint and the error that
//! names it.

use maud::{html, Markup};

use crate::domain::target::FieldError;

/// The label of the input an error's field path belongs to.
pub(super) fn input_of(field: &str) -> &str {
    let path = field.strip_prefix("config.").unwrap_or(field);
    match path {
        p if p.starts_with("flowControl.") => &p[12..],
        "flowControl" => "parallelism",
        p if p.starts_with("circuitBreaker.") => &p[15..],
        "circuitBreaker" => "failures",
        p if p.starts_with("headers") => "headers",
        p if p.starts_with("auth.") => &p[5..],
        "auth" => "tokenUrl",
        p if p.starts_with("credentials.") => &p[12..],
        "credentials" => "accessKeyId",
        p => p,
    }
}

/// One labelled input (or `textarea`) with its hint and error.
pub(in crate::portal) struct Field<'a> {
    pub name: &'a str,
    pub label: &'a str,
    pub value: &'a str,
    pub hint: Option<&'a str>,
    pub kind: &'a str,
}

pub(in crate::portal) fn field(f: Field<'_>, errors: &[FieldError]) -> Markup {
    let error = errors.iter().find(|e| input_of(&e.field) == f.name);
    let id = format!("f-{}", f.name);
    let hint_id = format!("{id}-hint");
    let err_id = format!("{id}-error");
    let described = match (f.hint.is_some(), error.is_some()) {
        (true, true) => format!("{hint_id} {err_id}"),
        (true, false) => hint_id.clone(),
        (false, true) => err_id.clone(),
        (false, false) => String::new(),
    };
    html! {
        div.field {
            label for=(id) { (f.label) }
            @if f.kind == "textarea" {
                textarea id=(id) name=(f.name) rows="3" aria-invalid=[error.map(|_| "true")]
                    aria-describedby=[(!described.is_empty()).then_some(&described)] { (f.value) }
            } @else {
                input id=(id) name=(f.name) type=(f.kind) value=(f.value) autocomplete="off"
                    aria-invalid=[error.map(|_| "true")]
                    aria-describedby=[(!described.is_empty()).then_some(&described)];
            }
            @if let Some(hint) = f.hint { small id=(hint_id) { (hint) } }
            @if let Some(e) = error { span.error id=(err_id) { (e.message) } }
        }
    }
}
