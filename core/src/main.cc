// taehv-run: see taehv/cli.h for the command line.
#include "taehv/cli.h"

int main(int argc, char** argv) { return taehv::runTaehvRun(argc, argv); }
