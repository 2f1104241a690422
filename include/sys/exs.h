/* The ES-API standard names <sys/exs.h>; UNH EXS and this library use <exs.h>. */
#include <exs.h>
