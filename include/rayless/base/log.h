// Printing for SPMD programs: by default only rank 0 talks to the console (llm.c's printf0);
// other ranks write to their own log file when one is opened.
#pragma once
#include <string>

namespace rayless {

void set_log_rank(int rank);             // the calling process's rank (0 until set)
int log_rank();
void open_rank_log_file(const std::string& path);  // where log_info writes on ranks != 0
void log_info(const std::string& line);  // rank 0: stdout; other ranks: their log file (if any)
void log_warn(const std::string& line);  // "rayless: warning: ..." on stderr (rank 0) / log file
void log_all(const std::string& line);   // every rank, prefixed "[rank R] " on stderr
// Writes `text` to the file descriptor with one write() (more only if the pipe takes part of it).
// Console lines go out whole this way: mpirun forwards a rank's stdout and stderr on separate pipes
// into one terminal or file, and a line written in pieces can have the other stream's lines land
// between its pieces.
void write_whole(int fd, const std::string& text);

}  // namespace rayless
