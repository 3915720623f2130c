"""Each workflow's toolchain builds and runs a small current project in a real session, offline
(the registries are not needed): a go.mod with a toolchain line and a test, a Java 21 source, an
edition-2024 crate, Ruby 3.3 pattern matching, Python and Node at their Debian 13 versions. The
session leaves nothing above low. One session with every workflow: one composed image."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.world import User, run_dejima

FILES = {
    "gomod/go.mod": "module example.com/hello\n\ngo 1.24\n\ntoolchain go1.24.0\n",
    "gomod/hello_test.go": 'package hello\n\nimport "testing"\n\nfunc TestSum(t *testing.T) {\n'
                           '\tif 1+1 != 2 {\n\t\tt.Fatal("sum")\n\t}\n}\n',
    "java/Main.java": "public class Main { record P(int x) {} public static void main(String[] a) {"
                      ' Object o = new P(3); if (o instanceof P(int x)) System.out.println("java " + x); } }\n',
    "rs/Cargo.toml": '[package]\nname = "hello"\nversion = "0.1.0"\nedition = "2024"\n',
    "rs/src/main.rs": 'fn main() { let v = [1, 2]; println!("rust {}", v.iter().sum::<i32>()); }\n',
    "t.rb": 'def f(x) = x * 2\ncase {a: f(2)}\nin {a: Integer => n} then puts "ruby #{RUBY_VERSION} #{n}"\nend\n',
}
SCRIPT = """set -e
cd gomod && GOTOOLCHAIN=local go test ./... && cd ..
cd java && javac --release 21 -d /tmp/classes Main.java && java -cp /tmp/classes Main && cd ..
ruby t.rb
cd rs && cargo run --offline -q && cd ..
python3 -c 'import sys; print("python", sys.version.split()[0])'
node -e 'console.log("node", process.versions.node)'
"""


@pytest.mark.timeout(1800)  # the first run builds the composed image (every toolchain)
def test_every_workflow_builds_and_tests_a_current_project(images: object, user: User, scope: str,
                                                           workspace: Path) -> None:
    for name, text in FILES.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    (workspace / "run.sh").write_text(SCRIPT)
    if os.getuid() == 0:
        for path in workspace.rglob("*"):
            os.chown(path, user.uid, user.gid)
    workflows = [arg for name in ("go", "java", "ruby", "rust", "python", "node") for arg in ("--workflow", name)]
    result = run_dejima(user, scope, *workflows, str(workspace), "--", "sh", "run.sh", timeout=1500)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    out = result.stdout
    assert re.search(r"^ok\s+example\.com/hello", out, re.MULTILINE), out  # a go test binary ran from /tmp
    assert "java 3" in out and "rust 3" in out
    assert re.search(r"^ruby 3\.[3-9]\.\d+ 4$", out, re.MULTILINE), out
    python = re.search(r"^python 3\.(\d+)", out, re.MULTILINE)
    node = re.search(r"^node (\d+)\.", out, re.MULTILINE)
    assert python and int(python.group(1)) >= 13 and node and int(node.group(1)) >= 20, out
    # every toolchain's work is quiet: cargo builds in the session's home (CARGO_TARGET_DIR), where
    # compiled output the host would reuse unverified cannot reach the workspace.
    worst = re.findall(r"^\s+(critical|high|medium)\s+\d+\s+(\S+)", result.stderr, re.MULTILINE)
    assert worst == [], result.stderr[-2000:]
    assert not (workspace / "rs/target").exists()
