//! A small client for Prometheus' HTTP API: `/api/v1/query` and `/api/v1/query_range`, with a
//! timeout, a bound on the answer's size, and every failure turned into a sentence that says
//! what to check.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// Largest answer read from Prometheus, in bytes (512 GPUs with every panel's fields is a few
/// MiB at most).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// One series of an instant query.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

impl Sample {
    pub(crate) fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str)
    }

    pub(crate) fn name(&self) -> &str {
        self.label("__name__").unwrap_or_default()
    }
}

/// One series of a range query: (unix seconds, value) points, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Range {
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) points: Vec<(f64, f64)>,
}

#[derive(Debug, Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct VectorItem {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

#[derive(Debug, Deserialize)]
struct MatrixItem {
    metric: BTreeMap<String, String>,
    values: Vec<(f64, String)>,
}

/// Talks to one Prometheus server.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    timeout: Duration,
}

/// Whether `base` is a URL Prometheus can be asked at (http or https); a sentence if not.
pub(crate) fn check_url(base: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(base)
        .map_err(|e| format!("{base:?} is not a URL ({e}); give Prometheus as http://HOST:9090"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "{base:?} is not an http or https URL; give Prometheus as http://HOST:9090"
        ));
    }
    Ok(())
}

impl Client {
    /// A client for the server at `base` (`http://host:9090`, or with a path prefix).
    pub(crate) fn new(base: &str, timeout: Duration) -> Result<Client, String> {
        check_url(base)?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("cannot set up an HTTP client: {e}"))?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_string(),
            timeout,
        })
    }

    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The value of `expr` now.
    pub(crate) async fn query(&self, expr: &str) -> Result<Vec<Sample>, String> {
        let data = self.call("query", &[("query", expr.to_string())]).await?;
        if data.result_type != "vector" {
            return Err(format!(
                "Prometheus answered a {} where a vector was expected",
                data.result_type
            ));
        }
        let items: Vec<VectorItem> = serde_json::from_value(data.result)
            .map_err(|e| format!("Prometheus' answer could not be read: {e}"))?;
        Ok(items
            .into_iter()
            .filter_map(|item| {
                let value = item.value.1.parse::<f64>().ok()?;
                Some(Sample {
                    labels: item.metric,
                    value,
                })
            })
            .collect())
    }

    /// `expr` from `start` to `end` (unix seconds) every `step` seconds.
    pub(crate) async fn query_range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<Vec<Range>, String> {
        let params = [
            ("query", expr.to_string()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{step:.3}")),
        ];
        let data = self.call("query_range", &params).await?;
        if data.result_type != "matrix" {
            return Err(format!(
                "Prometheus answered a {} where a matrix was expected",
                data.result_type
            ));
        }
        let items: Vec<MatrixItem> = serde_json::from_value(data.result)
            .map_err(|e| format!("Prometheus' answer could not be read: {e}"))?;
        Ok(items
            .into_iter()
            .map(|item| Range {
                labels: item.metric,
                points: item
                    .values
                    .into_iter()
                    .filter_map(|(t, v)| Some((t, v.parse::<f64>().ok()?)))
                    .collect(),
            })
            .collect())
    }

    async fn call(&self, endpoint: &str, params: &[(&str, String)]) -> Result<Data, String> {
        let url = format!("{}/api/v1/{endpoint}", self.base);
        let response = self
            .http
            .post(&url)
            .form(params)
            .send()
            .await
            .map_err(|e| self.describe(&e))?;
        let status = response.status();
        let body = read_bounded(response)
            .await
            .map_err(|e| self.describe(&e))?
            .ok_or_else(|| {
                format!(
                    "Prometheus' answer is larger than {} MiB; narrow what it holds",
                    MAX_ANSWER_BYTES >> 20
                )
            })?;
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| {
            format!(
                "{} answered HTTP {status} with something other than Prometheus' JSON; is it \
                 Prometheus?",
                self.base
            )
        })?;
        if answer.status != "success" {
            return Err(format!(
                "Prometheus refused the query ({}): {}",
                answer.error_type.unwrap_or_default(),
                answer.error.unwrap_or_default()
            ));
        }
        answer
            .data
            .ok_or_else(|| "Prometheus answered success without data".to_string())
    }

    fn describe(&self, error: &reqwest::Error) -> String {
        if error.is_timeout() {
            format!(
                "Prometheus at {} did not answer within {:.0} s; it may be overloaded",
                self.base,
                self.timeout.as_secs_f64()
            )
        } else if error.is_connect() {
            format!(
                "cannot reach Prometheus at {}: {}; check the URL and that it runs",
                self.base,
                root_cause(error)
            )
        } else {
            format!(
                "talking to Prometheus at {} failed: {}",
                self.base,
                root_cause(error)
            )
        }
    }
}

fn root_cause(error: &dyn std::error::Error) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The body, or `None` when it is larger than [`MAX_ANSWER_BYTES`].
async fn read_bounded(mut response: reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers every connection with `reply` (or never, when `None`).
    async fn server(reply: Option<&'static str>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer).await;
                    match reply {
                        Some(body) => {
                            let head = format!(
                                "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                body.len()
                            );
                            let _ = stream.write_all(head.as_bytes()).await;
                            let _ = stream.write_all(body.as_bytes()).await;
                        }
                        None => tokio::time::sleep(Duration::from_secs(60)).await,
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_query_error_and_a_slow_server_are_sentences() {
        let url = server(Some(
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
        ))
        .await;
        let client = Client::new(&url, Duration::from_secs(5)).unwrap();
        let error = client.query("up{").await.unwrap_err();
        assert!(
            error.contains("Prometheus refused the query (bad_data): parse error"),
            "{error}"
        );

        let slow = server(None).await;
        let client = Client::new(&slow, Duration::from_millis(300)).unwrap();
        let error = client.query("up").await.unwrap_err();
        assert!(error.contains("did not answer within"), "{error}");

        assert!(Client::new("prometheus:9090", Duration::from_secs(1)).is_err());
        assert!(Client::new("ftp://p:9090", Duration::from_secs(1)).is_err());
    }
}
