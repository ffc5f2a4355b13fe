// The plugin's two exported entry symbols (everything else is hidden).
#include "slurm_backend.h"

TAEHV_DEFINE_PLUGIN(taehv::slurm::SlurmBackend, "slurm", "1.0.0",
                    "SLURM: srun task layouts (one per node or per GPU), hostlists, sbatch submission")
