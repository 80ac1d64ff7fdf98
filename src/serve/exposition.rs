//! Turns metric families into Prometheus' text format (0.0.4) or OpenMetrics text, through the
//! `prometheus-client` crate's encoders, and picks the format from a scrape's `Accept` header.

use std::borrow::Cow;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::format;

/// Label pairs of one sample, in the order they are written.
pub(crate) type Labels = Vec<(&'static str, String)>;

/// A sample's value: integers stay exact (byte counts above 2^53 lose nothing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    Int(u64),
    Float(f64),
}

/// One metric family: a name, its help text, its type and its samples.
#[derive(Debug, Clone)]
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) kind: MetricType,
    pub(crate) samples: Vec<(Labels, Value)>,
}

impl Family {
    pub(crate) fn gauge(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            kind: MetricType::Gauge,
            samples: Vec::new(),
        }
    }

    /// A counter; `name` is without the `_total` suffix, which the encoder appends.
    pub(crate) fn counter(name: &'static str, help: &'static str) -> Self {
        Family {
            kind: MetricType::Counter,
            ..Family::gauge(name, help)
        }
    }

    /// Adds a sample when the value is known: a missing figure is left out, never written as 0.
    /// Label values come from other users' environments and command lines, and the exposition
    /// is read in terminals too (`curl`, `--once --format prometheus`), so characters a
    /// terminal would act on are written as [`format::escape`] shows them; the format itself
    /// escapes only `\`, `"` and line breaks.
    pub(crate) fn push(&mut self, mut labels: Labels, value: Option<Value>) {
        let Some(value) = value else {
            return;
        };
        for (_, text) in &mut labels {
            if let Cow::Owned(shown) = format::escape(text) {
                *text = shown;
            }
        }
        self.samples.push((labels, value));
    }
}

/// The two exposition formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: what Prometheus accepts by default and node exporter's
    /// textfile collector reads.
    Prometheus,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the `Accept` header lists it (Prometheus sends it first when it
    /// prefers it), the classic text format otherwise.
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        let wants_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|item| {
                let mut parts = item.split(';').map(str::trim);
                let media = parts.next().unwrap_or_default();
                let q_zero = parts.any(|p| p.replace(' ', "") == "q=0");
                media.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
            })
        });
        if wants_openmetrics {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The families as a registry collector, so the crate's encoders write them.
#[derive(Debug)]
struct Families(Vec<Family>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in self.0.iter().filter(|f| !f.samples.is_empty()) {
            let mut metric =
                encoder.encode_descriptor(family.name, family.help, None, family.kind)?;
            for (labels, value) in &family.samples {
                let mut sample = metric.encode_family(labels)?;
                match (family.kind, *value) {
                    (MetricType::Counter, Value::Int(v)) => {
                        sample.encode_counter::<NoLabelSet, u64, f64>(&v, None)?;
                    }
                    (MetricType::Counter, Value::Float(v)) => {
                        sample.encode_counter::<NoLabelSet, f64, f64>(&v, None)?;
                    }
                    (_, Value::Int(v)) => sample.encode_gauge(&v)?,
                    (_, Value::Float(v)) => sample.encode_gauge(&v)?,
                }
            }
        }
        Ok(())
    }
}

/// Writes `families` in `format`. Families without samples are left out whole.
pub(crate) fn encode(families: Vec<Family>, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families(families)));
    let mut out = String::with_capacity(64 * 1024);
    let written = match format {
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    };
    // Writing into a String cannot fail; an error here would be the crate's own bug.
    if written.is_err() {
        out.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_is_chosen_only_when_asked_for() {
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Prometheus);
        let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus_2)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0")),
            Format::Prometheus
        );
    }

    #[test]
    fn missing_values_and_empty_families_are_left_out() {
        let mut used = Family::gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).");
        used.push(vec![("gpu", "0".into())], Some(Value::Int(40960)));
        used.push(vec![("gpu", "1".into())], None);
        let empty = Family::gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).");
        let mut ooms = Family::counter("torchtop_ooms", "OOMs.");
        ooms.push(vec![("pid", "7".into())], Some(Value::Int(2)));
        let text = encode(vec![used, empty, ooms], Format::Prometheus);
        assert!(
            text.contains("DCGM_FI_DEV_FB_USED{gpu=\"0\"} 40960\n"),
            "{text}"
        );
        assert!(!text.contains("gpu=\"1\""), "{text}");
        assert!(!text.contains("GPU_TEMP"), "{text}");
        assert!(
            text.contains("# TYPE torchtop_ooms_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("torchtop_ooms_total{pid=\"7\"} 2\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        let open = encode(
            vec![{
                let mut f = Family::gauge("x", "y.");
                f.push(vec![], Some(Value::Float(1.5)));
                f
            }],
            Format::OpenMetrics,
        );
        assert!(open.ends_with("# EOF\n"), "{open}");
    }

    #[test]
    fn hostile_label_values_are_escaped() {
        let mut f = Family::gauge("torchtop_warning", "w.");
        f.push(
            vec![("subject", "job \"x\"\n} evil 1\\".into())],
            Some(Value::Int(1)),
        );
        f.push(
            vec![(
                "subject",
                "job\u{1b}]0;title\u{7} \u{9b}31m \u{202e}".into(),
            )],
            Some(Value::Int(2)),
        );
        let text = encode(vec![f], Format::Prometheus);
        // The line break is shown as the two characters \n, written with its backslash escaped.
        assert!(
            text.contains(r#"subject="job \"x\"\\n} evil 1\\""#),
            "{text}"
        );
        assert!(
            text.contains(r#"subject="job\\e]0;title\\x07 \\u{009b}31m \\u{202e}""#),
            "{text}"
        );
        assert!(
            !text.chars().any(|c| c != '\n' && c.is_control()),
            "{text:?}"
        );
        assert_eq!(text.lines().count(), 4, "{text}");
    }
}
