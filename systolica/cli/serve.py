"""``systolica serve``: an HTTP completions endpoint (OpenAI-style) with continuous batching.

    systolica serve --batch 4 --port 8000
    curl -s localhost:8000/v1/completions -d '{"prompt": "The capital of France is", "max_tokens": 16}'

See :mod:`systolica.driver.http_server` and docs/serving.md.
"""

from __future__ import annotations

import argparse
import sys

from systolica.cli.exits import EXIT_OK
from systolica.cli.options import add_board, add_config, count

__all__ = ["Serve"]


class Serve:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default="default",
                       help="a .gguf file, a safetensors directory, a .systolica artifact compiled with --batch, or "
                            "'default' (SmolLM2-135M-Instruct)")
        g = p.add_mutually_exclusive_group()
        add_board(g)
        add_config(g)
        p.add_argument("--batch", type=count(1), default=4, metavar="B",
                       help="sequences decoded together (the compiled batched step; default 4)")
        p.add_argument("--max-seq", type=count(1), default=256, metavar="N", help="compiled context (default 256)")
        p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
        p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from systolica.cli.run import cached_artifact, resolve_config
        from systolica.driver.device import open_device
        from systolica.driver.http_server import CompletionServer
        from systolica.driver.runtime import Runtime

        if args.model.endswith(".systolica"):
            from systolica.artifact import Artifact

            art = Artifact.load(args.model)
        else:
            cfg = resolve_config(args.board, args.config)
            art, _, _ = cached_artifact(args.model, cfg, page=None, max_seq=args.max_seq, prefill_chunk=16,
                                        act_split=True, batch=args.batch,
                                        say=lambda s: print(s, file=sys.stderr))
        dev = open_device("golden", art.config, dram_bytes=-(-art.dram_bytes // 4096) * 4096 + 4096)
        name = str(art.manifest["model"]["name"])
        srv = CompletionServer(Runtime(art, dev), args.host, args.port, model_name=name)
        print(f"serving {name} on http://{args.host}:{srv.port}/v1/completions (golden simulator, accelerator "
              f"{art.config.name!r}, up to {srv.srv.max_batch} sequences a decode step); Ctrl-C stops",
              file=sys.stderr, flush=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            srv.stop()
        return EXIT_OK
