"""Content signals (research §4.6): what in a flagged file's new text makes its finding worse:
fetch-and-run, encoded payloads, raw sockets, credential paths, environment dumps, exfiltration
hosts, backgrounding, invisible characters, "do not tell the user".

All of them are searched in one pass of RE2 over the text (dejima.core.audit.linear): a
minified bundle or a file made to make a backtracking matcher stall costs its length, not its
length squared.
"""

from __future__ import annotations

from dejima.core.audit.linear import PatternSet, encoded
from dejima.core.audit.names import invisible_in_text

SIGNALS = (
    ("fetches and runs code", r"(curl|wget|fetch|Invoke-WebRequest|iwr)\b[^\n]*\|\s*(ba|z|da|k)?sh\b|"
     r"(curl|wget)\b[^\n]*\|\s*(python|node|perl|ruby)|\$\((curl|wget)\b|\biex\b|python3? -c|node -e|\beval\b"),
    ("an encoded payload", r"[A-Za-z0-9+/]{200,}={0,2}|base64 (-d|--decode)|\batob\(|FromBase64String|"
     r"(\\x[0-9a-fA-F]{2}){40,}"),
    ("a raw socket", r"/dev/(tcp|udp)/|\bnc(at)?\b[^\n]*\s-(e|c)\b|socat\b[^\n]*exec:"),
    ("a credential path", r"~/\.ssh|\.ssh/id_|\.aws/credentials|~/\.aws|\.config/gh|\.git-credentials|"
     r"\.pypirc|\.docker/config\.json|\.kube/config|Keychains|\.netrc"),
    ("an environment dump", r"\bprintenv\b|\benv\s*[|>]|process\.env\s*\)|JSON\.stringify\(\s*process\.env|"
     r"os\.environ\s*\)|\$\{\{\s*secrets\.[^}]*\}\}[^\n]*https?://|https?://[^\n]*\$\{\{\s*secrets\."),
    ("an exfiltration host", r"pastebin\.|transfer\.sh|webhook\.site|requestbin|pipedream\.net|ngrok|"
     r"trycloudflare|discord(app)?\.com/api/webhooks|hooks\.slack\.com|interact\.sh|\.oast\.|burpcollaborator|"
     r"https?://\d{1,3}(\.\d{1,3}){3}"),
    ("a detached background process", r"(?m)\bnohup\b|\bdisown\b|\bsetsid\b|&\s*$"),
    ("hidden instructions", r"(?i)(do not|don't|never)\s+(tell|inform|mention|reveal|show)\b[^\n]{0,40}"
     r"\b(user|human|anyone)|ignore (all )?(previous|prior|above) instructions"),
)
_SIGNALS = PatternSet([pattern for _, pattern in SIGNALS])


def content_signals(text: str) -> list[str]:
    """The names of the signals in ``text``, in the order above."""
    found = [SIGNALS[index][0] for index in _SIGNALS.matching(encoded(text))]
    if invisible_in_text(text):
        found.append("invisible characters")
    return found
