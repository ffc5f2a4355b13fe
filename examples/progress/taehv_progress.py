"""Report training progress to taehv-run: the hang detection's channel, for any worker (issue 33).

taehv-run gives each worker a Unix datagram socket named in TAEHV_PROGRESS_SOCKET. A worker sends one short text
line per report, "step=<N> section=<name>": N is the optimizer step it is in (0-based: the steps done so far) and
name one of startup, data, forward_backward, exchange, optimizer, eval, checkpoint. Once a worker has reported,
taehv-run calls it hung after no report for max(--hang-timeout, 10 x its 99th-percentile step time), with longer
bounds in startup, checkpoint and eval; it then writes every local rank's stacks to the log folder and stops the job
as for a failed worker. A worker that never reports is never judged. Outside taehv-run this does nothing.

    from taehv_progress import report
    for step in range(start, steps):
        report(step, "data");             batch = next(loader)
        report(step, "forward_backward"); loss = model(batch); loss.backward()
        report(step, "optimizer");        opt.step()
    report(steps, "checkpoint");          save(...)
"""
import os
import socket

SECTIONS = ("startup", "data", "forward_backward", "exchange", "optimizer", "eval", "checkpoint")

_path = os.environ.get("TAEHV_PROGRESS_SOCKET")
_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) if _path else None
if _sock is not None:
    _sock.setblocking(False)


def report(step: int, section: str) -> None:
    """Tells taehv-run this worker is in `section` of optimizer step `step`; never blocks, never raises on send."""
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {', '.join(SECTIONS)}, got {section!r}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if _sock is None:
        return
    try:
        _sock.sendto(f"step={step} section={section}\n".encode(), _path)
    except OSError:
        pass  # taehv-run gone or its queue full: progress is advisory, training goes on
