// Boost.JSON, compiled once for every translation unit that parses JSON (token endpoint
// answers, JWT payloads), as asio_impl.cpp does for Asio and Beast.
#include <boost/json/src.hpp>
