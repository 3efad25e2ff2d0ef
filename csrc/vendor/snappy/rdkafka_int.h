/* rdkafka_int.h - kproducer's stand-in for librdkafka's rdkafka_int.h: see rd.h. */
#include "rd.h"
