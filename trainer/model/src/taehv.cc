// Bootstrap placeholder so the tree builds; the model issue replaces this file.
#include "taehv/model/taehv.h"
