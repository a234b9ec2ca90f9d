// Boost.URL compiled once for the request-target parser; kept apart from asio_impl.cpp
// because src.hpp defines BOOST_URL_SOURCE for the whole translation unit.
#include <boost/url/src.hpp>
