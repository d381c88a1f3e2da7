package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// The integrations are run as a user installs them, not from the repository: the Scrapy one
// pip-installed into a fresh virtualenv that sees Debian's Scrapy, the Crawlee one
// npm-installed into a fresh project. A package that does not install, or that works only
// beside its sources, fails here.

// scrapyVenv installs integrations/scrapy into a new virtualenv and returns its python. The
// sources are copied first, as pip builds in the source tree and would leave build/ and
// *.egg-info in the repository. PyPI is not reachable here, so pip uses no index and no
// build isolation: setuptools and Scrapy come from Debian through --system-site-packages.
func scrapyVenv(t *testing.T, ig string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "egressd-scrapy")
	if err := os.CopyFS(src, os.DirFS(filepath.Join(ig, "scrapy"))); err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(dir, "venv")
	runTool(t, dir, nil, "/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", venv)
	py := filepath.Join(venv, "bin/python")
	runTool(t, dir, nil, py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet", src)
	return py
}

// crawleeProject makes a new npm project with integrations/crawlee installed as a package
// (--install-links copies it as `npm pack` would, rather than linking the folder, so it
// resolves crawlee from the project as a user's install does) and returns the project.
// Crawlee comes in as the package's peer dependency, from npm's cache where npm ci in
// integrations/crawlee filled it.
func crawleeProject(t *testing.T, ig string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"crawl","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, dir, nil, "npm", "install", "--install-links", "--prefer-offline", "--no-audit", "--no-fund",
		filepath.Join(ig, "crawlee"))
	return dir
}
