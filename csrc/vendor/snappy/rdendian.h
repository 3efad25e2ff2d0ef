/* rdendian.h - kproducer's stand-in for librdkafka's rdendian.h: see rd.h. */
#include "rd.h"
