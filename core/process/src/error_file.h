// The torchelastic error file (TORCHELASTIC_ERROR_FILE), as torch.distributed.elastic writes it.
#pragma once

#include <ctime>
#include <string>

#include "taehv/process/supervisor.h"

namespace taehv::process {

/// The JSON torchelastic's ErrorHandler writes (torch/distributed/elastic/multiprocessing/errors/
/// error_handler.py, record_exception + dump_error_file):
///   {"message": {"message": "<Type>: <text>",
///                "extraInfo": {"py_callstack": "<trace>", "timestamp": "<unix seconds>"},
///                "errorCode": <exit code>}}
/// For a failed child, <Type> is ChildFailedError, the trace holds its last stderr lines, and extraInfo also
/// carries rank, local label and host. For an interrupt, <Type> is SignalException (as torchrun's). Valid UTF-8
/// whatever the child wrote: bytes that are not become U+FFFD and extraInfo.utf8_note says how many and where.
std::string errorFileJson(const SupervisorResult& result, std::time_t now);

/// When the failing child wrote its own torchelastic error file (its env's TORCHELASTIC_ERROR_FILE, written
/// after it started, e.g. by @record), returns its content with message.errorCode set to the child's exit code,
/// like torchrun's dump_error_file; else "".
std::string childErrorFileJson(const std::string& path, std::time_t not_before, int error_code);

}  // namespace taehv::process
