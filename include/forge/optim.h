#pragma once
// forge::optim: optimizers, gradient clipping and learning-rate schedules.

#include "forge/optim/adam.h"
#include "forge/optim/clip_grad.h"
#include "forge/optim/lr_scheduler.h"
#include "forge/optim/optimizer.h"
#include "forge/optim/param_groups.h"
#include "forge/optim/sgd.h"
