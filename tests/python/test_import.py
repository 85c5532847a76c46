"""`import attn` loads the library API only: not the real-model demo (python/attn_demo), its NumPy models or
runners, and not vLLM (its plugin module is imported by vLLM's entry point, never by attn itself)."""

import os
import subprocess
import sys


def test_import_attn_loads_library_only():
    code = ("import sys, attn\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('attn_demo', 'vllm', 'torch') or "
            "m in ('attn.vllm', 'attn.vllm.backend', 'attn.vllm.ops', 'attn.vllm_backend', 'attn.vllm_ops', "
            "'attn.backend', 'attn.demo', 'attn.models', 'attn.vllm_run'))\n"
            "print(' '.join(bad))\n")
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"import attn also imported: {r.stdout.strip()}"


def test_demo_package_is_separate():
    import attn
    import attn_demo

    demo_dir, attn_dir = (os.path.dirname(os.path.abspath(m.__file__)) for m in (attn_demo, attn))
    assert os.path.commonpath([demo_dir, attn_dir]) != attn_dir, (demo_dir, attn_dir)
