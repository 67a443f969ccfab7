//! Headless Chromium driven over WebDriver (ChromeDriver), for the portal's
//! end-to-end tests.
//!
//! Each [`Browser`] starts its own `chromedriver` in a session of its own
//! (`setsid`), with a temporary HOME and a fresh Chromium profile, and kills
//! that whole process group when dropped, so no Chromium outlives a test,
//! failed or not. `scripts/test` installs Chromium and ChromeDriver (Debian's
//! `chromium` and `chromium-driver`); without them these tests fail, they are
//! never skipped.
#![allow(dead_code)]

use std::{
    fs,
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use fantoccini::{elements::Element, Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// How long a wait for the page polls before it fails the test.
pub const WAIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(100);

pub const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";
pub const DEFAULT_CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The binary an environment variable names, or the default path.
fn binary(var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    let ok = fs::metadata(&path)
        .map(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
        .unwrap_or(false);
    assert!(
        ok,
        "\n\nThe portal's browser tests need Chromium and ChromeDriver, and {} is missing or not executable.\n\
         Run `scripts/test`, which installs them (Debian packages `chromium` and `chromium-driver`),\n\
         or install them yourself: `sudo apt-get install chromium chromium-driver`.\n\
         Elsewhere, point DISPATCH_TEST_CHROMIUM and DISPATCH_TEST_CHROMEDRIVER at the binaries.\n",
        path.display()
    );
    path
}

pub fn chromium_path() -> PathBuf {
    binary("DISPATCH_TEST_CHROMIUM", DEFAULT_CHROMIUM)
}

pub fn chromedriver_path() -> PathBuf {
    binary("DISPATCH_TEST_CHROMEDRIVER", DEFAULT_CHROMEDRIVER)
}

/// A `chromedriver` in its own session and process group, with its own HOME.
/// Dropping it kills the whole group: the driver and every Chromium it started.
pub struct ChromeDriver {
    child: Child,
    pub port: u16,
    home: tempfile::TempDir,
}

impl ChromeDriver {
    pub fn start() -> Self {
        let driver = chromedriver_path();
        let home = tempfile::Builder::new()
            .prefix("dispatch-chromedriver-")
            .tempdir()
            .expect("a temporary HOME");
        let log = fs::File::create(home.path().join("chromedriver.log")).expect("a log file");
        let port = super::free_port();
        // `setsid` makes the driver the leader of a new session and process
        // group (its pid is the group id), which Chromium's processes join.
        let child = Command::new("setsid")
            .arg(&driver)
            .arg(format!("--port={port}"))
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env("XDG_CACHE_HOME", home.path().join(".cache"))
            // Chromium inherits it: the reader's zone is not UTC, so a page
            // that mixes them up shows it.
            .env("TZ", BROWSER_ZONE)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start setsid {}: {e}", driver.display()));
        let mut d = Self { child, port, home };
        d.wait_until_ready();
        d
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.home.path().join("chromedriver.log")).unwrap_or_default()
    }

    fn wait_until_ready(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("the driver's status") {
                panic!(
                    "chromedriver exited ({status}) before it answered:\n{}",
                    self.log()
                );
            }
            if self.status_ready() {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "chromedriver did not answer on port {} within 20 s:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /status` answers `"ready": true`.
    fn status_ready(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = format!(
            "GET /status HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        );
        if s.write_all(req.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.replace(' ', "").contains("\"ready\":true")
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        // The group id is the driver's pid (setsid made it the leader).
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Chromium options every test runs with.
/// The time zone the test browser runs in.
pub const BROWSER_ZONE: &str = "Europe/Berlin";

pub fn capabilities(chromium: &Path, profile: &Path) -> serde_json::Map<String, Value> {
    let args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--no-first-run".into(),
        "--window-size=1280,900".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium.to_string_lossy(),
            "args": args,
        },
    });
    match caps {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// A headless Chromium pointed at one app.
pub struct Browser {
    pub client: Client,
    /// The app's base URL, `http://127.0.0.1:PORT`.
    pub base: String,
    // Dropped in this order after the client: the driver (and with it every
    // Chromium process), then the profile directory they wrote to.
    driver: ChromeDriver,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts ChromeDriver and a Chromium session for the app at `base`.
    pub async fn start(base: &str) -> Self {
        let chromium = chromium_path();
        let driver = ChromeDriver::start();
        let profile = tempfile::Builder::new()
            .prefix("dispatch-chromium-")
            .tempdir()
            .expect("a Chromium profile directory");
        // Both of rustls' crypto back ends are in the dependency graph, so
        // rustls cannot pick one by itself; the WebDriver client needs one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = ClientBuilder::rustls()
            .expect("a WebDriver HTTP client")
            .capabilities(capabilities(&chromium, profile.path()))
            .connect(&driver.url())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "Chromium ({}) did not start under chromedriver: {e}\n{}",
                    chromium.display(),
                    driver.log()
                )
            });
        Self {
            client,
            base: base.trim_end_matches('/').to_string(),
            driver,
            _profile: profile,
        }
    }

    /// Ends the WebDriver session (the driver itself goes on drop).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Opens a path of the app.
    pub async fn goto(&self, path: &str) {
        self.client
            .goto(&self.url(path))
            .await
            .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
    }

    /// The current path and query, `/portal/messages?state=Scheduled`.
    pub async fn path(&self) -> String {
        let u = self.client.current_url().await.expect("the current URL");
        match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        }
    }

    pub async fn title(&self) -> String {
        self.client.title().await.expect("the page title")
    }

    /// The HTTP status the current page was served with (the Navigation
    /// Timing entry's `responseStatus`).
    pub async fn status(&self) -> u16 {
        let v = self
            .js("return performance.getEntriesByType('navigation')[0].responseStatus;")
            .await;
        match v.as_u64() {
            Some(s) => s as u16,
            None => panic!("no response status for {}: {v}", self.path().await),
        }
    }

    /// Runs a script in the page; `arguments[0..]` are `args`.
    pub async fn js_with(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("the script failed: {e}\n{script}"))
    }

    pub async fn js(&self, script: &str) -> Value {
        self.js_with(script, Vec::new()).await
    }

    pub async fn find(&self, css: &str) -> Element {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e,
            Err(e) => panic!(
                "no `{css}` on {}: {e}\n{}",
                self.path().await,
                self.body_text().await
            ),
        }
    }

    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("cannot look for `{css}`: {e}"))
    }

    pub async fn exists(&self, css: &str) -> bool {
        !self.find_all(css).await.is_empty()
    }

    /// The rendered text of the first element `css` matches.
    pub async fn text(&self, css: &str) -> String {
        self.find(css)
            .await
            .text()
            .await
            .expect("an element's text")
            .trim()
            .to_string()
    }

    /// The text of the whole page (for failure messages).
    pub async fn body_text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(b) => b.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    pub async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("cannot click `{css}`: {e}"));
    }

    /// Follows the link whose text is `text`, and waits for the next page.
    pub async fn follow_link(&self, text: &str) {
        let link = match self.client.find(Locator::LinkText(text)).await {
            Ok(l) => l,
            Err(e) => panic!("no link {text:?} on {}: {e}", self.path().await),
        };
        self.mark_page().await;
        link.click()
            .await
            .unwrap_or_else(|e| panic!("cannot follow {text:?}: {e}"));
        self.wait_for_new_page().await;
    }

    /// Whether the first element `css` matches is shown (not hidden, not in a hidden fieldset).
    pub async fn displayed(&self, css: &str) -> bool {
        self.find(css)
            .await
            .is_displayed()
            .await
            .expect("whether it is shown")
    }

    /// An input's current value.
    pub async fn value(&self, css: &str) -> String {
        self.find(css)
            .await
            .prop("value")
            .await
            .expect("a value")
            .unwrap_or_default()
    }

    /// Resizes the window so that the page's viewport is `width` × `height`
    /// CSS pixels (headless Chromium still reserves room for window chrome).
    pub async fn set_viewport(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .expect("the window resized");
        let inner = self
            .js("return [window.innerWidth, window.innerHeight];")
            .await;
        let (iw, ih) = (
            inner[0].as_u64().unwrap_or(width as u64) as u32,
            inner[1].as_u64().unwrap_or(height as u64) as u32,
        );
        if (iw, ih) != (width, height) {
            self.client
                .set_window_size(
                    width + width.saturating_sub(iw),
                    height + height.saturating_sub(ih),
                )
                .await
                .expect("the window resized");
        }
    }

    /// Replaces an input's value by typing.
    pub async fn fill(&self, css: &str, value: &str) {
        let e = self.find(css).await;
        e.clear()
            .await
            .unwrap_or_else(|e| panic!("cannot clear `{css}`: {e}"));
        if !value.is_empty() {
            e.send_keys(value)
                .await
                .unwrap_or_else(|e| panic!("cannot type into `{css}`: {e}"));
        }
    }

    /// Sets an input's value by script and fires `input` and `change`, as
    /// typing would (for inputs such as `datetime-local` that typing handles
    /// by locale).
    pub async fn set_value(&self, css: &str, value: &str) {
        let found = self
            .js_with(
                "const e = document.querySelector(arguments[0]);
                 if (!e) return false;
                 e.value = arguments[1];
                 e.dispatchEvent(new Event('input', {bubbles: true}));
                 e.dispatchEvent(new Event('change', {bubbles: true}));
                 return true;",
                vec![json!(css), json!(value)],
            )
            .await;
        assert_eq!(found, json!(true), "no `{css}` on {}", self.path().await);
    }

    /// Marks the current document, so that [`Browser::wait_for_new_page`]
    /// can tell when another one has loaded.
    pub async fn mark_page(&self) {
        self.js("window.__dispatchOldPage = true;").await;
    }

    /// Waits until the page marked by [`Browser::mark_page`] was replaced by
    /// another that has finished loading.
    pub async fn wait_for_new_page(&self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let fresh = self
                .client
                .execute(
                    "return window.__dispatchOldPage !== true && document.readyState === 'complete';",
                    Vec::new(),
                )
                .await;
            if let Ok(Value::Bool(true)) = fresh {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "no new page loaded within {WAIT:?}; still on {}",
                    self.path().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks what submits a form or follows a link, and waits for the next page.
    pub async fn click_and_wait(&self, css: &str) {
        self.mark_page().await;
        self.click(css).await;
        self.wait_for_new_page().await;
    }

    /// Polls until the text of `css` is `expected` (trimmed), or fails after [`WAIT`].
    /// The page may reload meanwhile (a watched message page does).
    pub async fn wait_text(&self, css: &str, expected: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut last = String::from("(no such element)");
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                if let Ok(t) = e.text().await {
                    if t.trim() == expected {
                        return;
                    }
                    last = t.trim().to_string();
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let shot = self.screenshot("failed-wait").await;
                panic!(
                    "`{css}` did not read {expected:?} within {WAIT:?} on {}; it read {last:?} (screenshot {})",
                    self.path().await,
                    shot.display()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls until the current path starts with `prefix`, or fails after [`WAIT`].
    pub async fn wait_path(&self, prefix: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let path = self.path().await;
            if path.starts_with(prefix) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the browser did not reach {prefix} within {WAIT:?}; it is on {path}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Opens the sign-in page and sends the form, without checking the outcome.
    pub async fn submit_sign_in(&self, email: &str, password: &str) {
        if !self.path().await.starts_with("/portal/login") {
            self.goto("/portal/login").await;
        }
        self.fill("#email", email).await;
        self.fill("#password", password).await;
        self.click_and_wait(r#"form[action="/portal/login"] button[type=submit]"#)
            .await;
    }

    /// Signs in and checks that the portal let the person in.
    pub async fn sign_in(&self, email: &str, password: &str) {
        self.goto("/portal/login").await;
        self.submit_sign_in(email, password).await;
        let path = self.path().await;
        assert!(
            !path.starts_with("/portal/login"),
            "signing in as {email} failed: still on {path}\n{}",
            self.body_text().await
        );
    }

    /// Saves a PNG of the current viewport to `target/portal-screenshots/<name>.png`.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        save_png(name, &png)
    }

    /// Saves a PNG of the whole page: the window grows to the page's height
    /// for the shot (at most 6000 px), then returns to its size.
    pub async fn screenshot_full(&self, name: &str) -> PathBuf {
        let (w, h) = self
            .client
            .get_window_size()
            .await
            .expect("the window size");
        let sizes = self
            .js("return [window.innerHeight, Math.ceil(document.documentElement.scrollHeight)];")
            .await;
        let inner = sizes[0].as_u64().unwrap_or(h);
        let page = sizes[1].as_u64().unwrap_or(inner);
        let grow = page > inner;
        if grow {
            let outer = (page + h.saturating_sub(inner)).min(6000);
            self.client
                .set_window_size(w as u32, outer as u32)
                .await
                .expect("a taller window");
        }
        let path = self.screenshot(name).await;
        if grow {
            self.client
                .set_window_size(w as u32, h as u32)
                .await
                .expect("the window's size back");
        }
        path
    }
}

/// Where screenshots go: `target/portal-screenshots/` in the crate.
pub fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/portal-screenshots")
}

fn save_png(name: &str, png: &[u8]) -> PathBuf {
    let dir = screenshot_dir();
    fs::create_dir_all(&dir).expect("the screenshot directory");
    let path = dir.join(format!("{name}.png"));
    fs::write(&path, png).expect("the screenshot is written");
    println!("screenshot: {}", path.display());
    path
}
