"""The audit's catalogue of execution surfaces, as data (research/persistence.md §3-4).

Each PathRule names files by glob; a change to one is a finding at the rule's severity (detect by
location, research §0.2). Rules with a format are parsed and diffed key by key: a changed key takes
the severity of the first KeyRule it matches; a file that no longer parses (or is a link, which
host tools read through) is a finding at the worst severity the rule gives: the keys it hides may
be any of them. Never silence. Git, filesystem, name and dependency-tree rules
need code and live in their own modules; their key lists live here too.

Bump CATALOGUE_VERSION when a rule or a list changes: `dejima-audit` shows which version
produced a finding. Keep the lists in sync with the research doc's IDs.
"""

from __future__ import annotations

from dataclasses import dataclass

from dejima.core.audit.model import rank

CATALOGUE_VERSION = "2026.12.9"


# A KeyRule severity: the key runs nothing (a task's label, a schema version); a change to it is
# shown with the file's finding, never a finding of its own.
CONTEXT = "context"


@dataclass(frozen=True, slots=True)
class KeyRule:
    pattern: str  # over the flattened key, case-insensitive; '*' also crosses dots
    severity: str
    when: str = ""  # a named test on the new value (values.py); "" is always
    rule: str = ""  # the catalogue id when it differs from the file's (one file, several vectors)


@dataclass(frozen=True, slots=True)
class PathRule:
    id: str
    title: str
    paths: tuple[str, ...]
    severity: str | None  # the file added or changed and no key finding; None: keys decide
    fmt: str | None = None  # json, toml, yaml, ini, dotenv, xml, gitconfig, tool-versions, version, requirements
    keys: tuple[KeyRule, ...] = ()
    other_keys: str | None = None  # changed keys no KeyRule names
    grep: str | None = None  # file-level findings only when a new line matches this regex
    added: str | None = None  # severity when the file is new (default: severity)
    remedy: str = "restore"
    mounts: tuple[str, ...] = ("workspace",)
    keep: bool = True  # the start snapshot keeps matching files' bytes (not for a whole language's files)

    @property
    def worst(self) -> str:
        """The worst severity this rule gives (a key's context is none): a link put in the file's
        place, which host tools read through, is this bad."""
        given = [s for s in (self.severity, self.added, self.other_keys, *(k.severity for k in self.keys))
                 if s and s != CONTEXT]
        return max(given, key=rank) if given else "high"


def K(pattern: str, severity: str, when: str = "", rule: str = "") -> KeyRule:  # noqa: N802 - a table row
    return KeyRule(pattern, severity, when, rule)


# --- key lists (research §4.4) -------------------------------------------------------------------

ENV_DANGER = (
    "ld_preload", "ld_library_path", "ld_audit", "dyld_*", "node_options", "node_path", "node_extra_ca_certs",
    "pythonstartup", "pythonpath", "pythonhome", "pythonwarnings", "pythoninspect", "browser", "bash_env", "env",
    "prompt_command", "ps0", "ps1", "path", "shell", "editor", "visual", "pager", "git_*", "ssh_askpass",
    "rubyopt", "rubylib", "perl5opt", "perl5lib", "java_tool_options", "_java_options", "jdk_java_options",
    "maven_opts", "gradle_opts", "sbt_opts", "rustc_wrapper", "rustc", "cargo_*", "rustup_toolchain",
    "rustup_dist_server", "goflags", "goproxy", "gonosumdb", "gonosumcheck", "goinsecure", "gotoolchain",
    "npm_config_*", "yarn_*", "pip_*", "uv_*", "poetry_*", "tar_options", "docker_host", "kubeconfig",
    "http_proxy", "https_proxy", "all_proxy", "no_proxy", "ssl_cert_file", "requests_ca_bundle",
    "curl_ca_bundle", "*_base_url", "*_api_base", "*_endpoint", "codex_home", "claude_config_dir", "gemini_*",
    "xdg_config_home", "xdg_data_home", "home",
)

VSCODE_EXEC = (
    "python.defaultinterpreterpath", "python.pythonpath", "python.venvpath", "python.envfile",
    "python.terminal.activateenvironment", "terminal.integrated.profiles.*", "terminal.integrated.defaultprofile.*",
    "terminal.integrated.automationprofile.*", "terminal.integrated.env.*", "terminal.integrated.shell.*",
    "terminal.integrated.shellargs.*", "eslint.runtime", "eslint.nodepath", "eslint.execargv", "eslint.options*",
    "go.alternatetools*", "go.toolsenvvars*", "go.goroot", "rust-analyzer.server.path",
    "rust-analyzer.server.extraenv*", "rust-analyzer.cargo.extraenv*", "rust-analyzer.*overridecommand*",
    "rust-analyzer.runnables.*", "clangd.path", "clangd.arguments*", "c_cpp.default.compilerpath", "cmake.cmakepath",
    "cmake.configureonopen", "java.jdt.ls.java.home",
    "java.home", "java.configuration.runtimes*", "npm.packagemanager", "jest.jestcommandline", "deno.path",
    "prettier.prettierpath", "typescript.tsdk", "typescript.tsserver.nodepath", "php.validate.executablepath",
    "php.executablepath", "git.path", "jupyter.kernels.*",
)
# Any other setting whose last segment names a program, its arguments or its environment.
VSCODE_EXEC_SUFFIX = ("*path", "*paths", "*executable", "*exe", "*binary", "*bin", "*command", "*commandline", "*cmd",
                      "*runtime", "*server", "*tsdk", "*home", "*args", "*arguments", "*execargv", "*.env", "*envfile",
                      "*extraenv", "*shell")
VSCODE_AI = ("chat.tools.*", "chat.agent.*", "chat.mcp.*", "github.copilot.chat.*", "task.allowautomatictasks",
             "security.workspace.trust.*", "cursor.*autorun*", "windsurf.*auto*")

CLAUDE_SETTINGS = (
    K("hooks*", "critical"), K("statusline*", "critical"), K("apikeyhelper", "critical"),
    K("awsauthrefresh", "critical"), K("awscredentialexport", "critical"), K("otelheadershelper", "critical"),
    K("env.*", "critical", "foreign-model-url", "A02"), K("env.*", "high", rule="A02"),
    K("enableallprojectmcpservers", "critical", "not-false", "A03"),
    K("extraknownmarketplaces*", "critical", rule="A03"), K("enabledplugins*", "critical", rule="A03"),
    *(K(p, "high", rule="A03") for p in ("permissions*", "enabledmcpjsonservers*", "disabledmcpjsonservers*",
                                         "additionaldirectories*", "defaultmode", "disableallhooks", "sandbox*")),
)

NPM_LIFECYCLE = ("preinstall", "install", "postinstall", "prepare", "preprepare", "postprepare", "prepublish",
                 "prepublishonly", "prepack", "postpack", "preuninstall", "postuninstall", "dependencies")

CARGO_CONFIG = (
    K("build.rustc", "critical"), K("build.rustc-wrapper", "critical"), K("build.rustc-workspace-wrapper", "critical"),
    K("build.rustdoc", "high"), K("target.*.runner", "high"), K("target.*.linker", "high"), K("target.*.ar", "high"),
    K("target.*.rustflags*", "high"), K("build.rustflags*", "high"), K("env.*", "high"), K("alias.*", "high"),
    K("source.*", "high"), K("registries.*", "high"), K("registry.*", "high"), K("http.proxy", "high"),
    K("net.git-fetch-with-cli", "high"), K("credential-alias.*", "high"),
)

COMPOSE = (K("services.*.privileged", "high", "not-false"), K("services.*.volumes*", "high", "host-path"),
           K("services.*.pid", "high"), K("services.*.network_mode", "high"), K("services.*.cap_add*", "high"),
           K("services.*.devices*", "high"), K("services.*.env_file*", "high"), K("services.*.security_opt*", "high"),
           K("services.*.userns_mode", "high"), *(K(f"services.*.environment.{n}", "high") for n in ENV_DANGER))

# Keys of VS Code tasks and launch configurations that run nothing: names, grouping, display.
TASK_CONTEXT = tuple(K(p, CONTEXT) for p in (
    "version", "$schema", "tasks.*.label", "tasks.*.type", "tasks.*.group*", "tasks.*.presentation.*",
    "tasks.*.problemmatcher*", "tasks.*.detail", "tasks.*.icon.*", "tasks.*.hide", "tasks.*.isbackground",
    "tasks.*.promptonclose", "tasks.*.runoptions.instancelimit", "tasks.*.runoptions.reevaluateonrerun"))
LAUNCH_CONTEXT = tuple(K(p, CONTEXT) for p in (
    "version", "$schema", "configurations.*.name", "configurations.*.request", "configurations.*.presentation.*",
    "configurations.*.console", "configurations.*.internalconsoleoptions", "compounds.*.name",
    "compounds.*.presentation.*"))

# Dot-directories whose files nothing runs (research §4.10): the generic fallback skips them.
INERT_DIRS = (".github/ISSUE_TEMPLATE/", ".github/PULL_REQUEST_TEMPLATE/", ".github/DISCUSSION_TEMPLATE/",
              ".changeset/", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/", ".parcel-cache/",
              ".turbo/", ".next/", ".nuxt/", ".svelte-kit/", ".angular/cache/", ".gradle/", ".eslintcache",
              ".nyc_output/", ".coverage", ".cache/pre-commit/", ".idea/shelf/", ".DS_Store")


def _env(prefix: str, severity: str) -> tuple[KeyRule, ...]:
    return tuple(K(prefix + name, severity) for name in ENV_DANGER)


# --- path rules (research §3.2-3.8) --------------------------------------------------------------

IDE = (
    PathRule("I01", "VS Code tasks", (".vscode/tasks.json",), "medium", "json",
             (K("tasks.*.runoptions.runon", "critical", "not-default"), *TASK_CONTEXT, K("tasks.*", "medium")),
             "medium"),
    PathRule("I04", "VS Code MCP servers", (".vscode/mcp.json",), "critical", "json", (K("*", "critical"),)),
    PathRule("I02", "VS Code settings that run programs", (".vscode/settings.json",), None, "json", (
        K("mcp*", "critical", rule="I04"),
        *(K(p, "high", "not-false", "I03") for p in VSCODE_AI), *(K(p, "high") for p in VSCODE_EXEC),
        *(K(p, "high") for p in VSCODE_EXEC_SUFFIX), K("*", "high", "changed-file"),
        K("json.schemas*", "medium", "remote-url", "I08"), K("yaml.schemas*", "medium", rule="I08"),
        K("files.associations*", "low"), K("extensions.ignorerecommendations", "low"),
    )),
    PathRule("I05", "VS Code launch configurations", (".vscode/launch.json",), "medium", "json",
             (*LAUNCH_CONTEXT, K("configurations.*", "medium"), K("compounds.*", "medium")), "medium"),
    PathRule("I06", "recommended extensions", (".vscode/extensions.json", ".idea/externalDependencies.xml"), "low"),
    PathRule("I07", "VS Code workspace file", ("**/*.code-workspace",), "high", "json", (
        K("tasks.tasks.*.runoptions.runon", "critical", "not-default"), K("settings.mcp*", "critical", rule="I04"),
        K("*", "high")), "high"),
    PathRule("I09", "dev container", (".devcontainer/devcontainer.json", ".devcontainer.json",
                                      ".devcontainer/*/devcontainer.json"), "high", "json", (
        K("initializecommand*", "critical"), K("mounts*", "high"), K("runargs*", "high"), K("privileged", "high"),
        K("capadd*", "high"), K("features*", "high"), K("*command*", "high"), K("dockercomposefile*", "high"),
        K("build*", "high"), K("image", "high"), K("containerenv*", "high"), K("remoteenv*", "high")), "medium"),
    PathRule("I10", "JetBrains project files", (".idea/**",), "high"),
    PathRule("I11", "Zed settings and tasks", (".zed/settings.json", ".zed/tasks.json"), "high", "json",
             (K("*", "high"),)),
    PathRule("I12", "Vim/Neovim project rc", ("**/.nvim.lua", "**/.nvimrc", "**/.exrc"), "medium"),
    PathRule("I13", "Emacs directory variables", ("**/.dir-locals.el", "**/.dir-locals-2.el"), "medium"),
    PathRule("I14", "linter/formatter config that is code", (
        "**/eslint.config.*", "**/.eslintrc.{js,cjs,mjs}", "**/prettier.config.*", "**/.prettierrc.{js,cjs,mjs,ts}",
        "**/stylelint.config.*", "**/.stylelintrc.{js,cjs,mjs}", "**/babel.config.*", "**/.babelrc.{js,cjs,mjs}",
        "**/jest.config.*", "**/vitest.config.*", "**/vite.config.*", "**/webpack.config.*", "**/rollup.config.*",
        "**/postcss.config.*", "**/tailwind.config.*", "**/next.config.*", "**/nuxt.config.*", "**/svelte.config.*",
        "**/astro.config.*", "**/.storybook/**", "**/commitlint.config.*"), "high"),
    PathRule("I14", "linter plugins", ("**/.pylintrc", "**/pylintrc"), None, "ini",
             (K("*init-hook", "high"), K("*load-plugins", "high"), K("*evaluation", "high"),
              K("*init_hook", "high")), added="medium"),
    PathRule("I14", "mypy/flake8 plugins", ("**/mypy.ini", "**/.mypy.ini", "**/.flake8"), None, "ini",
             (K("*plugins", "high"), K("*local-plugins*", "high"), K("*paths", "high"))),
    PathRule("I14", "TypeScript compiler plugins", ("**/tsconfig.json", "**/tsconfig.*.json", "**/jsconfig.json"),
             None, "json", (K("compileroptions.plugins*", "high"), K("extends*", "medium", "path-like"))),
    PathRule("I14", "RuboCop/golangci config", ("**/.rubocop.yml", "**/.golangci.y*ml", "**/.golangci.toml"), "high"),
    PathRule("I16", "Jupyter/IPython config", ("**/jupyter_*_config.py", "**/ipython_*_config.py",
                                                "**/kernels/*/kernel.json"), "medium"),
    PathRule("I17", "debugger init files", ("**/.gdbinit", "**/.lldbinit"), "low"),
)

AGENTS = (
    PathRule("A01", "Claude Code settings", (".claude/settings.json", ".claude/settings.local.json"), None, "json",
             CLAUDE_SETTINGS, "medium"),
    PathRule("A04", "project MCP servers", (".mcp.json",), "critical", "json", (K("*", "critical"),)),
    PathRule("A05", "Claude commands, agents and skills", (".claude/commands/**", ".claude/agents/**",
                                                           ".claude/skills/**", ".claude/output-styles/**",
                                                           ".claude/hooks/**", ".claude-plugin/**"), "high"),
    PathRule("A06", "agent instructions", (
        "**/CLAUDE.md", "**/CLAUDE.local.md", ".claude/CLAUDE.md", "**/AGENTS.md", "**/AGENTS.override.md",
        "**/GEMINI.md", ".cursorrules", ".cursor/rules/**", ".windsurfrules", ".windsurf/rules/**", ".clinerules",
        ".clinerules/**", ".roo/**", ".github/copilot-instructions.md", ".github/instructions/**",
        ".github/prompts/**", ".github/chatmodes/**", ".junie/guidelines.md", ".kiro/steering/**", "CONVENTIONS.md",
        ".continue/rules/**"), "medium"),
    PathRule("A07", "Cursor MCP, environment and hooks", (".cursor/mcp.json", ".cursor/environment.json",
                                                          ".cursor/hooks.json", ".cursor/hooks/**"), "critical"),
    PathRule("A08", "Codex config", (".codex/config.toml", ".codex/**"), "critical"),
    PathRule("A09", "Gemini CLI settings, commands and extensions", (".gemini/settings.json", ".gemini/commands/**",
                                                                    ".gemini/extensions/**"), "critical"),
    PathRule("A10", "other agents' configs", (".aider.conf.yml", ".kiro/hooks/**", ".continue/config.*",
                                              ".roo/mcp.json", ".amazonq/**", ".windsurf/**", "**/*mcp*.json",
                                              ".goose/**", ".opencode/**", "opencode.json", "opencode.jsonc"), "high"),
    PathRule("A11", "agent ignore files", ("**/.cursorignore", "**/.aiexclude", "**/.geminiignore",
                                           "**/.aiderignore", "**/.codeiumignore"), "low"),
)

SHELL = (
    PathRule("E01", "direnv .envrc", ("**/.envrc",), "high"),
    PathRule("E03", ".env files with variables that run code", ("**/.env", "**/.env.*", "**/*.env"), None, "dotenv",
             _env("", "high")),
    PathRule("E04", "mise config and tasks", ("**/mise.toml", "**/.mise.toml", "**/mise.local.toml",
                                              "**/.mise.local.toml", ".config/mise.toml", ".config/mise/**",
                                              ".mise/**", "mise-tasks/**", ".mise-tasks/**"), "high", "toml",
             (K("tools.*", "high", "path-like"), K("tools.*", "low"), K("*", "high")), "high"),
    PathRule("E05", "asdf .tool-versions", ("**/.tool-versions",), None, "tool-versions",
             (K("*", "high", "exec-spec"), K("*", "low"))),
    PathRule("E06", "version files", tuple(f"**/{n}" for n in (
        ".python-version", ".ruby-version", ".node-version", ".nvmrc", ".go-version", ".java-version",
        ".terraform-version", ".sdkmanrc", ".bun-version")), None, "version",
        (K("*", "high", "path-like"), K("*", "low"))),
    PathRule("E07", "shell rc files", tuple(f"**/{n}" for n in (
        ".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zshenv", ".zprofile", ".zlogin",
        ".inputrc", ".rvmrc", ".kshrc", ".cshrc", ".tcshrc")), "low"),
    PathRule("E09", "Ansible config", ("**/ansible.cfg",), "high"),
)

BUILD = (
    PathRule("B01", "npm package scripts and dependency sources", ("**/package.json",), None, "json", (
        *(K(f"scripts.{name}", "high") for name in NPM_LIFECYCLE), K("scripts.*", "medium"),
        K("*dependencies.*", "high", "non-registry"), K("overrides.*", "high", "non-registry"),
        K("resolutions.*", "high", "non-registry"), K("packagemanager", "high"), K("bin*", "medium"),
        K("workspaces*", "medium"), K("simple-git-hooks*", "high"), K("lint-staged*", "high"),
        K("husky*", "high"), K("pre-commit*", "high"), K("config.*", "low"))),
    PathRule("B02", "npm config", ("**/.npmrc",), "high", "ini", (
        K("registry", "critical", "foreign-registry"), K("*:registry", "critical", "foreign-registry"),
        K("//*:_authtoken", "critical"), K("//*:_auth", "critical"), K("//*:_password", "critical"),
        K("script-shell", "critical"), K("node-options", "critical"), K("git", "critical"),
        K("init-module", "critical"), K("globalconfig", "critical"), K("userconfig", "critical"),
        K("*", "high")), "high"),
    PathRule("B03", "Yarn config and releases", ("**/.yarnrc", "**/.yarnrc.yml", ".yarn/releases/**",
                                                 ".yarn/plugins/**"), "critical"),
    PathRule("B04", "pnpm hooks and workspace", ("**/.pnpmfile.cjs", "**/.pnpmfile.mjs", "**/pnpm-workspace.yaml"),
             "high"),
    PathRule("B05", "Bun config", ("**/bunfig.toml",), "high"),
    PathRule("B06", "Deno tasks and imports", ("**/deno.json", "**/deno.jsonc"), None, "json",
             (K("tasks*", "medium"), K("importmap*", "medium"), K("imports*", "medium"))),
    PathRule("B08", "Python build and index config", ("**/setup.py",), "high"),
    PathRule("B08", "Python project build config", ("**/pyproject.toml",), None, "toml", (
        K("build-system*", "high"), K("tool.poetry.source*", "high"), K("tool.poetry.build*", "high"),
        K("tool.uv.index*", "high"), K("tool.uv.sources*", "high"), K("tool.uv.extra-index-url*", "high"),
        K("tool.uv.index-url", "high"), K("tool.hatch.build.hooks*", "high"), K("tool.hatch.build.targets.*.hooks*",
                                                                               "high"),
        K("tool.pdm.build*", "high"), K("tool.pdm.source*", "high"), K("tool.setuptools.cmdclass*", "high"),
        K("project.entry-points*", "medium"), K("tool.pytest.ini_options.addopts", "high", "plugin-option"),
        K("tool.pytest.ini_options.pythonpath*", "medium"), K("tool.mypy.plugins*", "high"),
        K("tool.coverage.run.plugins*", "high"), K("tool.pylint.*init-hook", "high"),
        K("tool.pylint.*load-plugins*", "high"), K("tool.tox.*commands*", "high"))),
    PathRule("B08", "Python setup.cfg/tox.ini", ("**/setup.cfg", "**/tox.ini", "**/pytest.ini"), None, "ini", (
        K("options.cmdclass*", "high"), K("options.entry_points*", "medium"), K("*addopts", "high", "plugin-option"),
        K("*commands*", "high"), K("*plugins", "high"), K("*init-hook", "high"), K("*load-plugins", "high"),
        K("*index-url", "high"), K("*install_command", "high"))),
    PathRule("B08", "Python installer config", ("**/uv.toml", "**/poetry.toml", "**/pip.conf", "**/Pipfile"),
             "high"),
    PathRule("B08", "requirements with install options", ("**/requirements*.txt", "**/constraints*.txt",
                                                          "**/requirements/*.txt"), None, "requirements",
             (K("*", "high", "install-option"),)),
    PathRule("B09", "pytest conftest", ("**/conftest.py",), "medium", added="high"),
    PathRule("B09", "nox/tox/coverage code", ("**/noxfile.py", "**/.coveragerc"), "high"),
    PathRule("B12", "Rust build script", ("**/build.rs",), "high"),
    PathRule("B12", "Cargo manifest", ("**/Cargo.toml",), None, "toml", (
        K("package.build", "high"), K("*dependencies.*.git", "high"), K("*dependencies.*.path", "high"),
        K("*dependencies.*.registry*", "high"), K("patch.*", "high"), K("replace.*", "high"),
        K("lib.proc-macro", "high"), K("workspace.dependencies.*.git", "high"), K("workspace.dependencies.*.path",
                                                                                 "high"))),
    PathRule("B12", "Cargo config", ("**/.cargo/config", "**/.cargo/config.toml"), "high", "toml", CARGO_CONFIG,
             "high"),
    PathRule("B12", "Rust toolchain file", ("**/rust-toolchain", "**/rust-toolchain.toml"), None, "toml",
             (K("toolchain.path", "critical"), K("toolchain.channel", "critical", "path-like"),
              K("toolchain.*", "low")), added="medium"),
    PathRule("B13", "Go module directives", ("**/go.mod", "**/go.work"), None, None,
             grep=r"^\s*(toolchain\s|replace\s|\S+\s+=>\s*\.{0,2}/|use\s)", added="medium"),
    PathRule("B13", "go:generate and cgo directives", ("**/*.go",), "medium", grep=r"^\s*(//go:generate|#cgo\s)",
             keep=False),
    PathRule("B14", "Gradle wrapper", ("**/gradle/wrapper/gradle-wrapper.jar",), "critical"),
    PathRule("B14", "Gradle wrapper download", ("**/gradle/wrapper/gradle-wrapper.properties",), "high", "ini",
             (K("distributionurl", "critical", "foreign-gradle"), K("distributionsha256sum", "critical"),
              K("*", "high")), "high"),
    PathRule("B14", "Gradle build logic", ("**/gradlew", "**/gradlew.bat", "**/settings.gradle",
                                           "**/settings.gradle.kts", "**/build.gradle", "**/build.gradle.kts",
                                           "**/buildSrc/**", "**/init.gradle*", "**/gradle/*.gradle*"), "high"),
    PathRule("B14", "Gradle JVM options", ("**/gradle.properties",), None, "ini",
             (K("org.gradle.jvmargs", "high", "jvm-hook"), K("org.gradle.java.home", "high"),
              K("systemprop.*proxy*", "high"))),
    PathRule("B15", "Maven extensions, JVM config and wrapper", ("**/.mvn/extensions.xml", "**/.mvn/jvm.config",
                                                                 "**/.mvn/maven.config", "**/mvnw", "**/mvnw.cmd",
                                                                 "**/.mvn/wrapper/**"), "critical"),
    PathRule("B15", "Maven plugins and repositories", ("**/pom.xml",), None, "xml",
             (K("*plugin*", "high"), K("*repositor*", "high"), K("*extension*", "high"),
              K("*profiles*", "medium"))),
    PathRule("B15", "sbt build", ("**/project/*.sbt", "**/project/*.scala", "**/.sbtopts", "**/.jvmopts",
                                  "**/build.sbt"), "high"),
    PathRule("B16", ".NET build props and tools", ("**/Directory.Build.props", "**/Directory.Build.targets",
                                                   "**/Directory.Packages.props", "**/NuGet.config", "**/nuget.config",
                                                   "**/global.json", "**/.config/dotnet-tools.json"), "high"),
    PathRule("B16", "MSBuild exec targets", ("**/*.csproj", "**/*.fsproj", "**/*.vbproj", "**/*.props",
                                             "**/*.targets"), "high", grep=r"<(Exec|UsingTask|Target)\b"),
    PathRule("B17", "configure-time commands", ("**/CMakeLists.txt", "**/*.cmake", "**/meson.build"), "medium",
             grep=r"\b(execute_process|run_command|exec_program|file\s*\(\s*DOWNLOAD)\b"),
    PathRule("B17", "native build config that runs code", ("**/CMakePresets.json", "**/CMakeUserPresets.json",
                                                           "**/conanfile.py", "**/configure", "**/autogen.sh",
                                                           "**/vcpkg-configuration.json"), "medium",
             added="high"),
    PathRule("B18", "Ruby and PHP build hooks", ("**/Gemfile", "**/*.gemspec", "**/.bundle/config", "**/Rakefile",
                                                 "**/.rspec", "**/.php-cs-fixer*.php", "**/phpunit.xml*"), "high"),
    PathRule("B18", "Composer scripts and plugins", ("**/composer.json",), None, "json",
             (K("scripts*", "high"), K("config.allow-plugins*", "high"), K("repositories*", "high"))),
    PathRule("B19", "task runners", ("**/Makefile", "**/makefile", "**/GNUmakefile", "**/*.mk", "**/justfile",
                                     "**/Justfile", "**/Taskfile.y*ml", "**/magefile.go", "**/Earthfile"), "low"),
    PathRule("B19", "host-side runners", ("**/Vagrantfile", "**/Tiltfile"), "medium"),
    PathRule("B20", "Bazel launchers and rc", ("tools/bazel", "**/.bazeliskrc", "**/.bazelversion", "**/.bazelrc"),
             "high"),
    PathRule("B21", "Terraform external programs", ("**/*.tf",), "high",
             grep=r"(data\s+\"external\"|local-exec|\"external\"\s*{)"),
    PathRule("B21", "Terraform providers", ("**/.terraform/**",), "high"),
    PathRule("B22", "container compose files", ("**/docker-compose*.y*ml", "**/compose*.y*ml"), None, "yaml", COMPOSE),
    PathRule("B22", "Dockerfile host mounts", ("**/Dockerfile", "**/Dockerfile.*", "**/*.Dockerfile"), "medium",
             grep=r"--mount=type=bind|--privileged"),
)

CI = (
    PathRule("C01", "GitHub Actions workflows", (".github/workflows/*.yml", ".github/workflows/*.yaml",
                                                 ".github/actions/**/action.yml", ".github/actions/**/action.yaml",
                                                 "**/action.yml", "**/action.yaml"), "high"),
    PathRule("C02", "other CI pipelines", ("**/.gitlab-ci.yml", ".gitlab/**", ".circleci/**", "**/Jenkinsfile",
                                           "**/azure-pipelines.yml", "**/bitbucket-pipelines.yml", "**/.travis.yml",
                                           ".buildkite/**", "**/.drone.yml", ".woodpecker/**", "**/.woodpecker.yml",
                                           ".gitea/workflows/**", ".forgejo/workflows/**", "**/cloudbuild.yaml"),
             "high"),
    PathRule("C03", "dependency bots and code owners", (".github/dependabot.yml", ".github/dependabot.yaml",
                                                        "**/renovate.json", "**/renovate.json5", "**/.renovaterc*",
                                                        "**/CODEOWNERS"), "medium"),
    PathRule("C04", "commit-time hook managers", ("**/.pre-commit-config.yaml", "**/.pre-commit-hooks.yaml",
                                                  ".husky/**", "**/lefthook*.yml", "**/.lefthook*.yml",
                                                  "**/.overcommit.yml", "**/.lintstagedrc*", "**/lint-staged.config.*"),
             "high"),
)

# The per-project home and the caches are dejima's own and only ever used inside sessions: what
# an agent leaves there runs in this project's next session, inside the boundary, not on the host.
HOME = (
    PathRule("M02", "agent and tool configs in the session home", (
        ".claude/settings.json", ".claude/settings.local.json", ".claude/commands/**", ".claude/agents/**",
        ".claude/skills/**", ".claude/hooks/**", ".claude/plugins/*", ".claude/plugins/{marketplaces,cache,repos}/**",
        ".codex/config.toml", ".gemini/settings.json",
        ".gemini/commands/**", ".gemini/extensions/**", ".aider.conf.yml", ".gitconfig", ".config/git/**",
        ".ssh/config", ".ssh/authorized_keys", ".ssh/rc", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc",
        ".pip/pip.conf", ".config/pip/pip.conf", ".cargo/config", ".cargo/config.toml", ".config/mise/**",
        ".config/fish/**", ".local/bin/**", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
        ".zshrc", ".zshenv", ".zprofile", ".inputrc", ".envrc", ".local/lib/python*/site-packages/*.pth",
        ".local/lib/python*/site-packages/{sitecustomize,usercustomize}.py"), "medium", mounts=("home",)),
    # Plugins' own data (Claude Code rewrites its builtin plugin's usage queue there every session).
    PathRule("M02", "Claude Code's plugin data store in the session home", (".claude/plugins/store/**",), "low",
             mounts=("home",)),
    PathRule("M02", "Claude Code's MCP servers in the session home", (".claude.json",), None, "json",
             (K("mcpservers*", "medium"), K("projects.*.mcpservers*", "medium"),
              K("projects.*.enabledmcpjsonservers*", "medium"), K("projects.*.hasTrustDialogAccepted", "low")),
             mounts=("home",)),
)

PATH_RULES: tuple[PathRule, ...] = (*IDE, *AGENTS, *SHELL, *BUILD, *CI, *HOME)

# --- git (research §3.1); git.py applies them --------------------------------------------------------

# (key pattern, rule, severity); the first match decides. Keys are lower-cased except subsections.
GIT_KEYS = (
    ("core.hookspath", "G03", "critical"), ("core.fsmonitor", "G04", "critical"),
    ("core.worktree", "G13", "critical"), ("extensions.worktreeconfig", "G14", "critical"),
    ("include.path", "G12", "critical"), ("includeif.*.path", "G12", "critical"),
    ("credential.helper", "G07", "critical"), ("credential.*.helper", "G07", "critical"),
    ("credential.*", "G07", "critical"),
    ("core.pager", "G05", "high"), ("pager.*", "G05", "high"), ("core.editor", "G05", "high"),
    ("sequence.editor", "G05", "high"), ("diff.external", "G05", "high"), ("diff.*.command", "G05", "high"),
    ("diff.*.textconv", "G05", "high"), ("interactive.difffilter", "G05", "high"), ("merge.*.driver", "G05", "high"),
    ("mergetool.*", "G05", "high"), ("difftool.*", "G05", "high"), ("guitool.*", "G05", "high"),
    ("core.sshcommand", "G06", "high"), ("ssh.variant", "G06", "high"), ("core.askpass", "G06", "high"),
    ("core.gitproxy", "G06", "high"), ("core.alternaterefscommand", "G06", "high"),
    ("remote.*.uploadpack", "G06", "high"), ("remote.*.receivepack", "G06", "high"), ("remote.*.vcs", "G06", "high"),
    ("protocol.*allow", "G06", "high"),
    ("filter.*", "G08", "high"),
    ("gpg.*", "G09", "high"), ("commit.gpgsign", "G09", "high"), ("tag.gpgsign", "G09", "high"),
    ("log.showsignature", "G09", "high"),
    ("alias.*", "G10", "high"),
    ("trailer.*.cmd", "G11", "high"), ("trailer.*.command", "G11", "high"), ("tar.*.command", "G11", "high"),
    ("web.browser", "G11", "high"), ("browser.*", "G11", "high"), ("sendemail.*", "G11", "high"),
    ("lfs.customtransfer.*", "G11", "high"), ("lfs.standalonetransferagent", "G11", "high"),
    ("remote.*.url", "G16", "high"), ("remote.*.pushurl", "G16", "high"), ("url.*", "G16", "high"),
    ("remote.pushdefault", "G16", "high"), ("branch.*.pushremote", "G16", "high"), ("http.*", "G16", "high"),
    ("lfs.url", "G16", "high"), ("remote.*.lfsurl", "G19", "high"), ("lfs.pushurl", "G19", "high"),
    ("submodule.*.update", "G17", "high"), ("submodule.*.url", "G17", "high"), ("submodule.*.path", "G17", "high"),
    ("submodule.recurse", "G17", "high"), ("fetch.recursesubmodules", "G17", "high"),
    ("core.attributesfile", "G18", "medium"),
    ("core.excludesfile", "G20", "medium"), ("status.showuntrackedfiles", "G20", "medium"),
    ("core.sparsecheckout*", "G20", "medium"),
    ("core.usereplacerefs", "G21", "high"),
    ("safe.*", "G27", "low"), ("uploadpack.packobjectshook", "G27", "low"), ("init.templatedir", "G27", "low"),
    ("core.protectntfs", "G28", "medium"), ("core.protecthfs", "G28", "medium"), ("*.fsckobjects", "G28", "medium"),
    ("fsck.*", "G28", "medium"), ("core.symlinks", "G28", "medium"), ("core.sharedrepository", "G28", "medium"),
)
# Keys a normal session may change without a finding (research K-GIT-ALLOW).
GIT_ALLOWED = ("core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
               "core.ignorecase", "core.precomposeunicode", "user.name", "user.email", "gc.*", "rerere.enabled",
               "pull.rebase", "push.default", "init.defaultbranch", "submodule.*.active", "extensions.objectformat",
               "maintenance.*", "remote.*.fetch", "branch.*.rebase", "core.autocrlf", "core.eol",
               "core.compression", "pack.*", "index.*", "feature.*", "color.*", "column.*", "advice.*")
# Built-in git commands: a repository alias of the same name is ignored by git (research G10).
GIT_BUILTINS = frozenset((
    "add", "am", "archive", "bisect", "blame", "branch", "bundle", "checkout", "cherry-pick", "clean", "clone",
    "commit", "config", "describe", "diff", "fetch", "format-patch", "gc", "grep", "init", "log", "merge", "mv",
    "notes", "pull", "push", "range-diff", "rebase", "reflog", "remote", "reset", "restore", "revert", "rm",
    "shortlog", "show", "sparse-checkout", "stash", "status", "submodule", "switch", "tag", "worktree",
))
# Inside a git directory: what git itself rewrites during ordinary work (research §4.10).
GIT_HOUSEKEEPING = ("objects/", "refs/heads/", "refs/tags/", "refs/remotes/", "refs/stash", "refs/notes/",
                    "refs/bisect/", "refs/prefetch/", "logs/", "index", "HEAD", "ORIG_HEAD", "FETCH_HEAD",
                    "COMMIT_EDITMSG", "packed-refs", "description", "info/refs", "gitk.cache", "AUTO_MERGE",
                    "MERGE_MSG", "MERGE_MODE", "SQUASH_MSG", "REBASE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD",
                    "BISECT_", "NOTES_MERGE_", "shallow", "lost-found/", "gc.log", "gc.pid", "modules/",
                    "worktrees/", "branches/", "rr-cache/", "filter-repo/",
                    "hooks/")  # hooks/*.sample: git's own examples, which never run
# Files git reads where a session's write means a planted command or a hidden change.
GIT_INNER = (
    ("hooks/*", "G01", "critical", "git hook"),
    ("commondir", "G15", "critical", "the git dir's common dir"),
    ("gitdir", "G15", "critical", "a worktree's git dir pointer"),
    ("refs/replace/**", "G21", "high", "a replace ref: git shows other content than committed"),
    ("info/grafts", "G21", "high", "a graft: git shows another history"),
    ("rebase-merge/**", "G22", "high", "an operation in progress, resumed by the next git command"),
    ("rebase-apply/**", "G22", "high", "an operation in progress, resumed by the next git command"),
    ("sequencer/**", "G22", "high", "an operation in progress, resumed by the next git command"),
    ("MERGE_HEAD", "G22", "high", "a merge in progress"),
    ("objects/info/alternates", "G23", "medium", "objects read from another path"),
    ("objects/info/http-alternates", "G23", "medium", "objects fetched from another place"),
    ("info/exclude", "G20", "medium", "files hidden from git status"),
    ("info/sparse-checkout", "G20", "medium", "files hidden from the work tree"),
    ("info/attributes", "G18", "medium", "attributes that name drivers"),
)
GIT_KEY_TITLES = {
    "G03": "core.hooksPath", "G04": "core.fsmonitor", "G05": "pager, editor, diff or merge command",
    "G06": "transport command", "G07": "credential helper", "G08": "content filter driver", "G09": "signing program",
    "G10": "alias", "G11": "other command-valued key", "G12": "config include", "G13": "core.worktree",
    "G14": "per-worktree config", "G16": "remote or URL rewrite", "G17": "submodule", "G18": "attributes file",
    "G19": "LFS endpoint", "G20": "hidden from git status", "G21": "replaced objects", "G27": "protected key (ignored "
    "by git)", "G28": "git safety downgraded",
}
# Vectors that share a file with others (KeyRule.rule): their titles.
KEY_RULE_TITLES = {"I03": "AI assistant auto-approval and trust settings", "I04": "MCP servers in VS Code settings",
                   "I08": "remote JSON/YAML schema URL (fetched by the editor)",
                   "A02": "agent environment (base URLs, proxies, keys)", "A03": "agent permissions, trust and plugins"}
# Rules that are code, not rows above: (title, severity), for `dejima-audit show` and the docs.
CODED_RULES = {
    "G01": ("git hook, or a file under core.hooksPath", "critical"),
    "G02": ("submodule or worktree hook", "critical"),
    "G08": ("filter/diff/merge driver defined in config and named by an attribute", "high-critical"),
    "G15": ("the git directory replaced or redirected", "critical"),
    "G24": ("nested or bare repository", "critical"), "G25": (".git look-alike name", "critical"),
    "G26": ("link into the git directory", "high"), "E02": ("file an already-allowed .envrc loads", "high"),
    "E10": ("module shadowing the standard library", "medium"),
    "I12": ("Vim project rc, or a modeline in a changed text file that names a program or expression",
            "medium-high"),
    "I13": ("Emacs directory variables, or file-local variables that set code or programs", "medium"),
    "B07": ("installed dependency tree (one finding per tree)", "low-high"),
    "B10": ("Python environment (start-up files named one by one)", "low-critical"),
    "B11": ("bytecode written in the session", "high"),
    "F01": ("link out of the tree or into a watched place", "high"), "F02": ("hard link", "low-high"),
    "F03": ("setuid/setgid bits or capabilities", "critical"), "F04": ("device node, FIFO or socket", "low-critical"),
    "F05": ("new executable bit", "low"), "F06": ("world-writable or new owner", "medium"),
    "F07": ("huge file or deep nesting", "low"), "F08": ("name trick (case, Unicode, controls)", "medium-critical"),
    "F09": ("invisible characters in code", "medium"), "F10": ("content changed behind an old mtime", "low"),
    "M01": ("changed existing cache entry (caches under the session home, cache mounts)", "medium"),
    "X00": ("a session or mount that could not be audited (critical), or a rule that failed on one path (at "
            "that rule's worst severity)", "low-critical"),
    "X01": ("file in an unlisted dot-directory", "low"), "X02": ("new root config-as-code file", "medium"),
    "X03": ("other change inside a git directory", "medium"), "X04": ("other git config key", "medium-high"),
    "X05": ("lockfile checksum changed without a version change", "high"),
    "X06": ("lockfile edited to versions the installed tree does not have", "high"),
    "X07": ("file a session's manifest watches ([audit] watch) that no other rule judges: created, modified "
            "or deleted", "medium"),
    "G20": ("paths hidden from git status (ignore lines, index flags), raised when they hide a finding",
            "medium-high"),
}
